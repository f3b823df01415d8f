/* A stepped wall clock for one process tree: stands in for `date -s` on the host.
 *
 * Stepping the machine's own CLOCK_REALTIME would step it for every process here
 * (other tests, TLS, the build), and a time namespace can offset only the monotonic
 * and boot-time clocks, not CLOCK_REALTIME. So the agent runs with this library in
 * LD_PRELOAD: every CLOCK_REALTIME reading made through libc's clock_gettime (Python's
 * time.time(), time.time_ns(), datetime.now(), logging's stamps), gettimeofday and
 * time() is moved by the offset, in nanoseconds, held in the first 8 bytes of the file
 * named by WALLCLOCK_OFFSET_FILE, shared with the test through a mapping: a write by
 * the test steps the clock of every process at once. CLOCK_MONOTONIC and
 * CLOCK_BOOTTIME pass through unchanged, as they do when a real clock is stepped.
 * What it cannot do: move a timer that the kernel arms on CLOCK_REALTIME itself.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static const volatile int64_t *offset_ns;

static void init(void) {
    real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    const char *path = getenv("WALLCLOCK_OFFSET_FILE");
    if (path == NULL)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    void *mapped = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped != MAP_FAILED)
        offset_ns = mapped;
}

static int is_wall(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (real_clock_gettime == NULL)
        init();
    int rc = real_clock_gettime(clock, ts);
    if (rc == 0 && is_wall(clock) && offset_ns != NULL) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *offset_ns;
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
