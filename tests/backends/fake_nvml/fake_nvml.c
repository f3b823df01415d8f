/*
 * A FAKE libnvidia-ml.so.1 for the tests. It stands in for NVIDIA's driver
 * library, which cannot exist on a machine without an NVIDIA GPU and driver:
 * it is NOT NVML and controls no hardware.
 *
 * It exports the handful of NVML entry points agentpool's NVML backend calls,
 * with NVML's C signatures and return codes, so that NVIDIA's own Python
 * binding (nvidia-ml-py, module pynvml) loads it through its ordinary lookup
 * (CDLL("libnvidia-ml.so.1"), i.e. LD_LIBRARY_PATH or an already-loaded
 * library with that soname) and the binding, ctypes and error mapping are the
 * real ones.
 *
 * State lives in a text file named by $FAKE_NVML_STATE, read on every call
 * and rewritten (temp file + rename) when a limit is set, so tests and
 * several processes see one truth:
 *
 *   driver loaded|missing
 *   <uuid> <name> <min_mw> <max_mw> <default_mw> <limit_mw> <power_mw> <fail>
 *   ...one line per device
 *
 * <fail>: none; not_supported (limit constraints and set: NOT_SUPPORTED);
 * no_permission (set: NO_PERMISSION); lost (every call on the device:
 * GPU_IS_LOST); sticky (set returns SUCCESS but the limit does not change,
 * so it reads back different). Names use '_' for spaces.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_DEVICES 64
#define FIELD 96

struct fake_device {
    char uuid[FIELD];
    char name[FIELD];
    unsigned int min_mw, max_mw, default_mw, limit_mw, power_mw;
    char fail[FIELD];
};

/* nvmlDevice_t is an opaque pointer; ours points at one of these. */
struct nvmlDevice_st { unsigned int index; };
typedef struct nvmlDevice_st *nvmlDevice_t;

static struct nvmlDevice_st handles[MAX_DEVICES];
static struct fake_device devices[MAX_DEVICES];
static unsigned int device_count;
static int driver_loaded;
static int initialised;

static int load_state(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    if (path == NULL) return -1;
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    char driver[FIELD];
    if (fscanf(f, "driver %95s", driver) != 1) { fclose(f); return -1; }
    driver_loaded = strcmp(driver, "loaded") == 0;
    device_count = 0;
    while (device_count < MAX_DEVICES) {
        struct fake_device *d = &devices[device_count];
        int n = fscanf(f, " %95s %95s %u %u %u %u %u %95s", d->uuid, d->name, &d->min_mw,
                       &d->max_mw, &d->default_mw, &d->limit_mw, &d->power_mw, d->fail);
        if (n != 8) break;
        device_count++;
    }
    fclose(f);
    return 0;
}

static int save_state(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) return -1;
    fprintf(f, "driver %s\n", driver_loaded ? "loaded" : "missing");
    for (unsigned int i = 0; i < device_count; i++) {
        struct fake_device *d = &devices[i];
        fprintf(f, "%s %s %u %u %u %u %u %s\n", d->uuid, d->name, d->min_mw, d->max_mw,
                d->default_mw, d->limit_mw, d->power_mw, d->fail);
    }
    if (fclose(f) != 0) return -1;
    return rename(tmp, path);
}

/* Common prologue of a device call: the state, the device, its 'lost' failure. */
static nvmlReturn_t device_of(nvmlDevice_t handle, struct fake_device **out) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (load_state() != 0) return NVML_ERROR_UNKNOWN;
    if (!driver_loaded) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (handle == NULL || handle->index >= device_count) return NVML_ERROR_INVALID_ARGUMENT;
    *out = &devices[handle->index];
    if (strcmp((*out)->fail, "lost") == 0) return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_out(const char *value, char *buf, unsigned int length) {
    size_t n = strlen(value);
    if (n + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, n + 1);
    for (size_t i = 0; i < n; i++) if (buf[i] == '_') buf[i] = ' ';
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (load_state() != 0) return NVML_ERROR_UNKNOWN;
    if (!driver_loaded) return NVML_ERROR_DRIVER_NOT_LOADED;
    initialised++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    initialised--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (load_state() != 0) return NVML_ERROR_UNKNOWN;
    if (!driver_loaded) return NVML_ERROR_DRIVER_NOT_LOADED;
    *count = device_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (load_state() != 0) return NVML_ERROR_UNKNOWN;
    if (index >= device_count) return NVML_ERROR_INVALID_ARGUMENT;
    handles[index].index = index;
    *device = &handles[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (load_state() != 0) return NVML_ERROR_UNKNOWN;
    for (unsigned int i = 0; i < device_count; i++) {
        if (strcmp(devices[i].uuid, uuid) == 0) {
            if (strcmp(devices[i].fail, "lost") == 0) return NVML_ERROR_GPU_IS_LOST;
            handles[i].index = i;
            *device = &handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    struct fake_device *d;
    nvmlReturn_t r = device_of(device, &d);
    return r != NVML_SUCCESS ? r : copy_out(d->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    struct fake_device *d;
    nvmlReturn_t r = device_of(device, &d);
    return r != NVML_SUCCESS ? r : copy_out(d->name, name, length);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                          unsigned int *min_mw,
                                                          unsigned int *max_mw) {
    struct fake_device *d;
    nvmlReturn_t r = device_of(device, &d);
    if (r != NVML_SUCCESS) return r;
    if (strcmp(d->fail, "not_supported") == 0) return NVML_ERROR_NOT_SUPPORTED;
    *min_mw = d->min_mw;
    *max_mw = d->max_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *mw) {
    struct fake_device *d;
    nvmlReturn_t r = device_of(device, &d);
    if (r != NVML_SUCCESS) return r;
    if (strcmp(d->fail, "not_supported") == 0) return NVML_ERROR_NOT_SUPPORTED;
    *mw = d->default_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *mw) {
    struct fake_device *d;
    nvmlReturn_t r = device_of(device, &d);
    if (r != NVML_SUCCESS) return r;
    *mw = d->limit_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *mw) {
    struct fake_device *d;
    nvmlReturn_t r = device_of(device, &d);
    if (r != NVML_SUCCESS) return r;
    /* A board draws at most its limit. */
    *mw = d->power_mw < d->limit_mw ? d->power_mw : d->limit_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit_mw) {
    struct fake_device *d;
    nvmlReturn_t r = device_of(device, &d);
    if (r != NVML_SUCCESS) return r;
    if (strcmp(d->fail, "not_supported") == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (strcmp(d->fail, "no_permission") == 0) return NVML_ERROR_NO_PERMISSION;
    if (limit_mw < d->min_mw || limit_mw > d->max_mw) return NVML_ERROR_INVALID_ARGUMENT;
    if (strcmp(d->fail, "sticky") == 0) return NVML_SUCCESS; /* claims success, changes nothing */
    d->limit_mw = limit_mw;
    return save_state() == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
