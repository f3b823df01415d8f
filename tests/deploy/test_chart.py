"""The joulie chart, rendered by the real Helm engine, against its README (charts/joulie).

Every rendered object is also validated against the Kubernetes OpenAPI schemas
shipped by ``kubernetes-validate`` (strict: unknown fields are errors).
"""

from __future__ import annotations

import json
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.chart import (
    BOTH_MODES,
    CHART_DIR,
    NAMESPACE,
    RELEASE,
    Manifest,
    Render,
    agent_workload,
    container,
    env_of,
    find,
    one,
)

POOL: dict[str, Any] = {"agent": {"mode": "pool"}}
KUBE_VERSION = "1.30"

# Value sets rendered by the lint and schema-validation tests: both modes, and
# every optional branch of the templates switched on at least once.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "pool": POOL,
    "daemonset-everything": {
        "agent": {
            "hostNetwork": False,
            "privileged": False,
            "nodeSelector": {"joulie.io/managed": "true"},
            "tolerations": [{"operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/os",
                                        "operator": "In",
                                        "values": ["linux"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"memory": "256Mi"},
            },
            "priorityClassName": "system-node-critical",
            "podAnnotations": {"example.com/a": "b"},
            "podLabels": {"team": "energy"},
            "args": ["--log-level", "debug"],
            "service": {"annotations": {"example.com/c": "d"}},
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "serviceAccount": {"annotations": {"example.com/e": "f"}},
        "serviceMonitor": {"enabled": True, "scrapeTimeout": "10s", "labels": {"release": "prom"}},
        "dashboards": {"enabled": True, "annotations": {"grafana_folder": "Joulie"}},
    },
    "pool-everything": {
        "agent": {
            "mode": "pool",
            "pool": {
                "replicas": 4,
                "shards": None,
                "nodeSelector": "joulie.io/managed=true,pool=a",
            },
            "env": {"METRICS_ADDR": ":9090", "LOG_LEVEL": "debug", "SYSFS_ROOT": "/sim/{node}"},
            "shutdownTimeoutSeconds": 45,
            "logFormat": "text",
        },
        "serviceMonitor": {"enabled": True},
        "dashboards": {"enabled": True, "namespace": "monitoring"},
    },
    "pool-lease-autoscaled": {
        "agent": {
            "mode": "pool",
            "pool": {"membership": "lease", "assignment": "modulo", "leaseDuration": "30s",
                     "leaseRenew": "10s",
                     "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 8}},
            "resources": {"requests": {"cpu": "100m"}},
        },
    },
    "no-service-no-rbac": {
        "agent": {"service": {"enabled": False}},
        "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "existing"},
    },
}

# docs/metrics.md: the metric names the dashboard may use.
CONTRACT_METRICS = {
    "joulie_backend_mode",
    "joulie_policy_cap_watts",
    "joulie_rapl_energy_uj",
    "joulie_rapl_estimated_power_watts",
    "joulie_rapl_package_total_power_watts",
    "joulie_dvfs_observed_power_watts",
    "joulie_dvfs_ema_power_watts",
    "joulie_dvfs_throttle_pct",
    "joulie_dvfs_above_trip_count",
    "joulie_dvfs_below_trip_count",
    "joulie_dvfs_actions_total",
    "joulie_dvfs_cpu_cur_freq_khz",
    "joulie_dvfs_cpu_max_freq_khz",
    "joulie_reconcile_errors_total",
}
# Documented in docs/metrics.md beyond section 7 (issue 16: which nodes hold their cap).
AGENT_EXTRA_METRICS = {"joulie_dvfs_cap_error_watts"}
# The supervisor's own series (section 7 names only their prefix and meaning);
# these are the names the dashboard expects the supervisor to export.
SUPERVISOR_METRICS = {
    "agentpool_owned_nodes",
    "agentpool_workers",
    "agentpool_worker_restarts_total",
}


def security(workload: Manifest) -> dict[str, Any]:
    result: dict[str, Any] = container(workload)["securityContext"]
    return result


# --- lint and schemas -------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_lint_reports_no_errors_or_warnings(helm: Any, values: dict[str, Any]) -> None:
    report = helm.lint(CHART_DIR, values, strict=True, namespace=NAMESPACE, kube_version="v1.30.0")
    assert report["errors"] == []
    # Severity 1 is "info" (e.g. "icon is recommended"); 2 warning, 3 error.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_manifest_matches_the_kubernetes_schema(
    render: Render, values: dict[str, Any]
) -> None:
    objects = render(values)
    assert objects
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            # ServiceMonitor is defined by prometheus-operator's CRD, not by
            # Kubernetes; kubernetes-validate has no schema for it.
            continue
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_the_kubernetes_schema_check_is_not_vacuous(render: Render) -> None:
    daemonset = one(render(), "DaemonSet")
    daemonset["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError, match="hostNetwrok"):
        kubernetes_validate.validate(daemonset, KUBE_VERSION, strict=True)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"agent": {"mode": "bogus"}}, "/agent/mode"),
        ({"agent": {"mode": "pool", "pool": {"replicas": "3"}}}, "/agent/pool/replicas"),
        ({"agent": {"pool": {"shards": "2"}}}, "/agent/pool/shards"),
        ({"agent": {"pool": {"membership": "elastic"}}}, "/agent/pool/membership"),
        ({"agent": {"pool": {"assignment": "ring"}}}, "/agent/pool/assignment"),
        ({"agent": {"pool": {"leaseDuration": "15"}}}, "/agent/pool/leaseDuration"),
        ({"agent": {"pool": {"autoscaling": {"maxReplicas": 0}}}}, "/agent/pool/autoscaling"),
        ({"agent": {"env": {"POOL_MEMBERSHIP": "lease"}}}, "invalid propertyName"),
        ({"agent": {"privileged": "yes"}}, "/agent/privileged"),
        ({"agent": {"hostNetwork": "true"}}, "/agent/hostNetwork"),
        ({"agent": {"service": {"port": "8080"}}}, "/agent/service/port"),
        ({"agent": {"shutdownTimeoutSeconds": 0}}, "/agent/shutdownTimeoutSeconds"),
        ({"agent": {"logFormat": "xml"}}, "/agent/logFormat"),
        ({"agent": {"env": {"AGENT_MODE": "pool"}}}, "invalid propertyName 'AGENT_MODE'"),
        ({"agent": {"env": {"JOULIE_API": "auto"}}}, "invalid propertyName 'JOULIE_API'"),
        ({"joulie": {"api": "v2"}}, "/joulie/api"),
        ({"agent": {"env": {"SYSFS_ROOT": "/sys"}}}, "invalid propertyName 'SYSFS_ROOT'"),
        ({"agent": {"env": {"METRICS_ADDR": "8080"}}}, "/agent/env/METRICS_ADDR"),
        ({"agent": {"env": {"RECONCILE_INTERVAL": "20"}}}, "/agent/env/RECONCILE_INTERVAL"),
        ({"agent": {"replicas": 3}}, "/agent"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"bogus": True}, "bogus"),
    ],
)
def test_values_schema_rejects(
    chart: Any, helm: Any, values: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(complaint)):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


def test_values_schema_accepts_pool_sysfs_root_and_boolean_env(render: Render) -> None:
    objects = render(
        {"agent": {"mode": "pool", "env": {"SYSFS_ROOT": "/sim/{node}", "SIMULATE_ONLY": True}}}
    )
    env = env_of(agent_workload(objects))
    assert env["SYSFS_ROOT"] == "/sim/{node}"
    assert env["SIMULATE_ONLY"] == "true"


def test_values_yaml_has_the_contract_defaults(chart: Any) -> None:
    agent = chart.values["agent"]
    assert agent["mode"] == "daemonset"
    assert agent["privileged"] is True
    assert agent["hostNetwork"] is True
    assert agent["env"] == {
        "RECONCILE_INTERVAL": "20s",
        "METRICS_ADDR": ":8080",
        "SIMULATE_ONLY": "false",
    }
    pool = dict(agent["pool"])
    elastic = {key: pool.pop(key) for key in (
        "membership", "assignment", "leaseDuration", "leaseRenew", "autoscaling")}
    assert pool.pop("podNodeSelector") == {}  # Joulie's key, empty as in Joulie's chart
    assert pool == {"replicas": 2, "shards": 2, "nodeSelector": "joulie.io/managed=true"}
    # The elastic pool is opt-in: static membership, exactly the contract's pool, by default.
    assert elastic["membership"] == "static"
    assert elastic["autoscaling"]["enabled"] is False
    assert agent["service"]["enabled"] is True
    assert agent["service"]["port"] == 8080


# --- daemonset mode ---------------------------------------------------------


def test_daemonset_mode_renders_a_daemonset_and_no_pool(render: Render) -> None:
    objects = render()
    ds = one(objects, "DaemonSet", f"{RELEASE}-agent")
    assert ds["metadata"]["namespace"] == NAMESPACE
    assert find(objects, "StatefulSet") == []
    assert [s["metadata"]["name"] for s in find(objects, "Service")] == [f"{RELEASE}-agent-metrics"]
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"


def test_daemonset_environment(render: Render) -> None:
    env = env_of(one(render(), "DaemonSet"))
    assert env["AGENT_MODE"] == "daemonset"
    assert env["NODE_NAME"] == {"fieldRef": "spec.nodeName"}
    assert env["SYSFS_ROOT"] == "/host-sys"
    assert env["RECONCILE_INTERVAL"] == "20s"
    assert env["METRICS_ADDR"] == ":8080"
    assert env["SIMULATE_ONLY"] == "false"
    assert env["PROMETHEUS_MULTIPROC_DIR"] == "/var/run/agentpool/metrics"
    assert env["LOG_FORMAT"] == "json"
    assert env["SHUTDOWN_TIMEOUT"] == "20s"
    assert not {"POD_NAME", "POOL_SHARDS", "POOL_NODE_SELECTOR"} & env.keys()


def test_the_host_sys_path_is_a_value(render: Render) -> None:
    ds = one(render({"agent": {"hostSysPath": "/var/lib/lab/sys"}}), "DaemonSet")
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in container(ds)["volumeMounts"]}
    assert volumes[mounts["/host-sys"]["name"]]["hostPath"] == {
        "path": "/var/lib/lab/sys", "type": "Directory"
    }
    assert env_of(ds)["SYSFS_ROOT"] == "/host-sys"  # the agent's view does not change


def test_daemonset_mounts_host_sys_and_runs_privileged_as_root(render: Render) -> None:
    ds = one(render(), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container(ds)["volumeMounts"]}
    host_sys = volumes[mounts["/host-sys"]["name"]]
    assert host_sys["hostPath"]["path"] == "/sys"
    assert not mounts["/host-sys"].get("readOnly", False)  # the agent writes powercap/cpufreq
    sc = security(ds)
    assert sc["privileged"] is True
    assert sc["runAsUser"] == 0
    assert sc["runAsNonRoot"] is False


def test_daemonset_host_network_follows_the_value(render: Render) -> None:
    pod = one(render(), "DaemonSet")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"

    pod = one(render({"agent": {"hostNetwork": False}}), "DaemonSet")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is False
    assert "dnsPolicy" not in pod


def test_daemonset_unprivileged_when_asked(render: Render) -> None:
    sc = security(one(render({"agent": {"privileged": False}}), "DaemonSet"))
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False


def test_daemonset_has_no_scheduling_constraints_by_default(render: Render) -> None:
    pod = one(render(), "DaemonSet")["spec"]["template"]["spec"]
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
        assert key not in pod
    assert "resources" not in container(one(render(), "DaemonSet"))


def test_scheduling_values_reach_the_pod(render: Render) -> None:
    values = VALUE_SETS["daemonset-everything"]
    ds = one(render(values), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"joulie.io/managed": "true"}
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["affinity"] == values["agent"]["affinity"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert container(ds)["resources"] == values["agent"]["resources"]
    assert container(ds)["args"] == ["--log-level", "debug"]
    meta = ds["spec"]["template"]["metadata"]
    assert meta["annotations"] == {"example.com/a": "b"}
    assert meta["labels"]["team"] == "energy"


# --- pool mode --------------------------------------------------------------


def test_pool_mode_renders_a_statefulset_behind_a_headless_service(render: Render) -> None:
    objects = render(POOL)
    assert find(objects, "DaemonSet") == []
    sts = one(objects, "StatefulSet", f"{RELEASE}-agent-pool")
    assert sts["spec"]["replicas"] == 2
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    headless = one(objects, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]


def test_pool_environment(render: Render) -> None:
    env = env_of(one(render(POOL), "StatefulSet"))
    assert env["AGENT_MODE"] == "pool"
    assert env["POD_NAME"] == {"fieldRef": "metadata.name"}
    assert env["POOL_NODE_SELECTOR"] == "joulie.io/managed=true"
    assert env["POOL_SHARDS"] == "2"
    assert env["RECONCILE_INTERVAL"] == "20s"
    assert env["PROMETHEUS_MULTIPROC_DIR"] == "/var/run/agentpool/metrics"
    # The shard id comes from the pod's ordinal, never from one shared value.
    assert not {"NODE_NAME", "POOL_SHARD_ID", "SYSFS_ROOT"} & env.keys()


@pytest.mark.parametrize(("shards", "expected"), [(None, "5"), (0, "5"), (5, "5")])
def test_pool_shards_default_to_the_replica_count(
    render: Render, shards: int | None, expected: str
) -> None:
    values = {"agent": {"mode": "pool", "pool": {"replicas": 5, "shards": shards}}}
    sts = one(render(values), "StatefulSet")
    assert sts["spec"]["replicas"] == 5
    assert env_of(sts)["POOL_SHARDS"] == expected


def test_pool_shards_different_from_replicas_is_refused(chart: Any, helm: Any) -> None:
    values = {"agent": {"mode": "pool", "pool": {"replicas": 3}}}  # shards stays 2
    with pytest.raises(helm.HelmRenderError, match=r"agent\.pool\.shards \(2\) must equal"):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


LEASE: dict[str, Any] = {"agent": {"mode": "pool", "pool": {"membership": "lease"}}}
POOL_ROLE = f"{RELEASE}-agent-pool"
EVENTS_ROLE = f"{RELEASE}-agent-events"


def test_pool_membership_is_static_by_default_with_no_lease_access(render: Render) -> None:
    objects = render(POOL)
    env = env_of(one(objects, "StatefulSet"))
    assert env["POOL_MEMBERSHIP"] == "static"
    assert not {"POD_NAMESPACE", "POOL_ASSIGNMENT", "POOL_STATEFULSET"} & env.keys()
    assert find(objects, "Role", POOL_ROLE) == []
    assert find(objects, "RoleBinding", POOL_ROLE) == []
    assert find(objects, "HorizontalPodAutoscaler") == []


def test_lease_membership_environment(render: Render) -> None:
    sts = one(render(LEASE), "StatefulSet")
    env = env_of(sts)
    assert env["POOL_MEMBERSHIP"] == "lease"
    assert env["POD_NAME"] == {"fieldRef": "metadata.name"}
    assert env["POD_NAMESPACE"] == {"fieldRef": "metadata.namespace"}
    assert env["POOL_STATEFULSET"] == sts["metadata"]["name"]
    assert (env["POOL_ASSIGNMENT"], env["POOL_LEASE_DURATION"], env["POOL_LEASE_RENEW"]) == (
        "rendezvous", "15s", "5s")
    # The shard count follows the live pods, not a fixed value.
    assert "POOL_SHARDS" not in env
    assert sts["spec"]["replicas"] == 2


def test_lease_membership_gets_a_namespaced_role_for_leases_and_reading_the_statefulset(
    render: Render,
) -> None:
    objects = render(LEASE)
    role = one(objects, "Role", POOL_ROLE)
    assert role["metadata"]["namespace"] == NAMESPACE
    granted = {(g, r): sorted(rule["verbs"]) for rule in role["rules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == {
        ("coordination.k8s.io", "leases"): ["create", "get", "list", "update"],
        ("apps", "statefulsets"): ["get", "list", "watch"],
    }
    binding = one(objects, "RoleBinding", POOL_ROLE)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    account = one(objects, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    # Nothing about Leases or StatefulSets cluster-wide.
    cluster_rules = one(objects, "ClusterRole")["rules"]
    assert not [r for r in cluster_rules if {"leases", "statefulsets"} & set(r["resources"])]
    assert find(render({**LEASE, "rbac": {"create": False}}), "Role") == []


@pytest.mark.parametrize("values", [{}, POOL, LEASE], ids=["daemonset", "pool", "lease"])
def test_node_events_get_create_and_patch_in_kube_system_only(
    render: Render, values: dict[str, Any]
) -> None:
    objects = render(values)
    role = one(objects, "Role", EVENTS_ROLE)
    assert role["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
    ]
    binding = one(objects, "RoleBinding", EVENTS_ROLE)
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["roleRef"]["name"] == EVENTS_ROLE
    account = one(objects, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    # Nothing about events cluster-wide.
    cluster_rules = one(objects, "ClusterRole")["rules"]
    assert not [r for r in cluster_rules if "events" in r["resources"]]
    workload = next(o for o in objects if o["kind"] in ("DaemonSet", "StatefulSet"))
    assert env_of(workload)["EVENTS"] == "true"


def test_node_events_can_be_turned_off_with_their_permissions(render: Render) -> None:
    objects = render({"agent": {"events": False}})
    assert find(objects, "Role", EVENTS_ROLE) == []
    assert find(objects, "RoleBinding", EVENTS_ROLE) == []
    assert env_of(one(objects, "DaemonSet"))["EVENTS"] == "false"


def test_the_autoscaler_is_optional_and_only_for_lease_membership(render: Render) -> None:
    assert find(render(LEASE), "HorizontalPodAutoscaler") == []
    autoscaled = {"agent": {"mode": "pool", "pool": {
        "membership": "lease", "autoscaling": {"enabled": True, "maxReplicas": 9}}}}
    objects = render(autoscaled)
    hpa = one(objects, "HorizontalPodAutoscaler")
    sts = one(objects, "StatefulSet")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                             "name": sts["metadata"]["name"]}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 9)
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 70
    assert "replicas" not in sts["spec"]  # the autoscaler owns it
    # A static pool cannot follow an autoscaler: no HPA even when asked.
    static = {"agent": {"mode": "pool", "pool": {"autoscaling": {"enabled": True}}}}
    assert find(render(static), "HorizontalPodAutoscaler") == []


def test_pool_selector_value(render: Render) -> None:
    values = {
        "agent": {"mode": "pool", "pool": {"nodeSelector": "joulie.io/managed=true,rack in (a,b)"}}
    }
    env = env_of(one(render(values), "StatefulSet"))
    assert env["POOL_NODE_SELECTOR"] == "joulie.io/managed=true,rack in (a,b)"


def test_pool_pods_are_locked_down(render: Render) -> None:
    # hostNetwork and privileged are DaemonSet values: the pool ignores them.
    sts = one(
        render({"agent": {"mode": "pool", "hostNetwork": True, "privileged": True}}), "StatefulSet"
    )
    pod = sts["spec"]["template"]["spec"]
    assert not pod.get("hostNetwork", False)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = security(sts)
    assert sc["privileged"] is False
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not any(v.get("hostPath") for v in pod["volumes"])


# --- both modes -------------------------------------------------------------


@BOTH_MODES
def test_env_map_is_passed_through(render: Render, mode: str) -> None:
    extra = {"DVFS_MIN_FREQ_KHZ": "1200000", "RESTORE_ON_EXIT": "false", "LOG_LEVEL": "debug"}
    values = {"agent": {"mode": mode, "env": {"RECONCILE_INTERVAL": "5s", **extra}}}
    env = env_of(agent_workload(render(values)))
    assert env["RECONCILE_INTERVAL"] == "5s"
    for name, value in extra.items():
        assert env[name] == value


@BOTH_MODES
def test_probes_and_metrics_port(render: Render, mode: str) -> None:
    workload = agent_workload(render({"agent": {"mode": mode}}))
    agent = container(workload)
    assert agent["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert agent["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert agent["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # Held until ready for up to a second less than the kubelet waits for the answer.
    readiness = agent["readinessProbe"]
    assert readiness["httpGet"] == {"path": "/readyz?wait=4s", "port": "metrics"}
    assert readiness["timeoutSeconds"] == 5
    # The startup probe gates the others: none starts before the agent is serving.
    assert agent["livenessProbe"]["initialDelaySeconds"] == 0
    startup = agent["startupProbe"]
    assert startup["initialDelaySeconds"] >= 2  # >= 1 s real: the kubelet counts whole seconds
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60


@BOTH_MODES
def test_the_readiness_wait_follows_its_timeout(render: Render, mode: str) -> None:
    values = {"mode": mode, "readinessProbe": {"timeoutSeconds": 1}}
    agent = container(agent_workload(render({"agent": values})))
    assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz?wait=0s"
    values = {"mode": mode, "readinessProbe": {"timeoutSeconds": 12}}
    agent = container(agent_workload(render({"agent": values})))
    assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz?wait=11s"


@BOTH_MODES
def test_metrics_port_follows_metrics_addr(render: Render, mode: str) -> None:
    objects = render({"agent": {"mode": mode, "env": {"METRICS_ADDR": "0.0.0.0:9102"}}})
    assert container(agent_workload(objects))["ports"][0]["containerPort"] == 9102
    service = one(objects, "Service", f"{RELEASE}-agent-metrics")
    assert service["metadata"]["annotations"]["prometheus.io/port"] == "9102"
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


@BOTH_MODES
def test_multiprocess_dir_and_tmp_are_emptydirs(render: Render, mode: str) -> None:
    workload = agent_workload(render({"agent": {"mode": mode}}))
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container(workload)["volumeMounts"]}
    multiproc = env_of(workload)["PROMETHEUS_MULTIPROC_DIR"]
    assert volumes[mounts[multiproc]]["emptyDir"] == {"medium": "Memory"}  # tmpfs: no writeback
    assert "emptyDir" in volumes[mounts["/tmp"]]  # read-only root filesystem
    assert security(workload)["readOnlyRootFilesystem"] is True


@BOTH_MODES
def test_the_journal_of_host_values_has_its_own_state_dir(render: Render, mode: str) -> None:
    workload = agent_workload(render({"agent": {"mode": mode}}))
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container(workload)["volumeMounts"]}
    env = env_of(workload)
    state = env["STATE_DIR"]
    assert "emptyDir" in volumes[mounts[state]]  # outlives container restarts
    assert mounts[state] != mounts[env["PROMETHEUS_MULTIPROC_DIR"]]
    assert not state.startswith(env["PROMETHEUS_MULTIPROC_DIR"])


@BOTH_MODES
@pytest.mark.parametrize(("timeout", "grace"), [(None, 30), (1, 11), (45, 55)])
def test_grace_period_outlasts_the_shutdown_timeout(
    render: Render, mode: str, timeout: int | None, grace: int
) -> None:
    agent: dict[str, Any] = {"mode": mode}
    if timeout is not None:
        agent["shutdownTimeoutSeconds"] = timeout
    workload = agent_workload(render({"agent": agent}))
    pod = workload["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == grace
    shutdown = env_of(workload)["SHUTDOWN_TIMEOUT"]
    assert shutdown == f"{timeout or 20}s"
    assert pod["terminationGracePeriodSeconds"] > int(shutdown.removesuffix("s"))


@BOTH_MODES
def test_image_values(render: Render, mode: str) -> None:
    agent = container(agent_workload(render({"agent": {"mode": mode}})))
    assert agent["image"] == "agentpool:0.1.0"  # the chart's appVersion
    assert agent["imagePullPolicy"] == "IfNotPresent"
    values = {
        "agent": {"mode": mode},
        "image": {"repository": "r.example/agentpool", "tag": "dev", "pullPolicy": "Never"},
    }
    objects = render(values)
    agent = container(agent_workload(objects))
    assert agent["image"] == "r.example/agentpool:dev"
    assert agent["imagePullPolicy"] == "Never"
    assert agent_workload(objects)["metadata"]["labels"]["app.kubernetes.io/version"] == "dev"


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_recommended_labels_everywhere(render: Render, values: dict[str, Any]) -> None:
    objects = render(values)
    workload = agent_workload(objects)
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    labelled = [(obj["metadata"]["name"], obj["metadata"]["labels"]) for obj in objects]
    for name, labels in [*labelled, ("the agent pods", pod_labels)]:
        # The agent pods and the metrics Service carry Joulie's name for its agent: Joulie's
        # docs select the pods by it, its ServiceMonitors the Service (test_joulie_values.py).
        joulies = name in ("the agent pods", f"{RELEASE}-agent-metrics")
        assert labels["app.kubernetes.io/name"] == ("joulie-agent" if joulies else "joulie")
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/component"] == "agent"
        assert labels["app.kubernetes.io/part-of"] == "joulie"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"]
        assert labels["helm.sh/chart"] == "joulie-0.2.0"
    selector = workload["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    # The selector is immutable: nothing that changes between upgrades.
    assert not {"app.kubernetes.io/version", "helm.sh/chart"} & selector.keys()


def test_the_selector_is_the_same_whatever_the_names(render: Render) -> None:
    # nameOverride renames objects and their app.kubernetes.io/name, never the agent pods'
    # selector, which no upgrade may change.
    for mode in ("daemonset", "pool"):
        base = agent_workload(render({"agent": {"mode": mode}}))["spec"]["selector"]
        for names in ({"nameOverride": "power"}, {"fullnameOverride": "energy"}):
            workload = agent_workload(render({**names, "agent": {"mode": mode}}))
            assert workload["spec"]["selector"] == base, names
        assert base == {"matchLabels": {
            "app.kubernetes.io/name": "joulie-agent",
            "app.kubernetes.io/instance": RELEASE,
            "app.kubernetes.io/component": "agent",
        }}


def test_pod_labels_cannot_take_the_selectors_labels(render: Render) -> None:
    # A pod that its workload's selector does not match is refused by the API server.
    extra = {"app.kubernetes.io/name": "mine", "app.kubernetes.io/instance": "mine",
             "app.kubernetes.io/part-of": "energy", "team": "a"}
    workload = agent_workload(render({"agent": {"podLabels": extra}}))
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # The chart's other labels give way to the user's.
    assert labels["app.kubernetes.io/part-of"] == "energy"
    assert labels["team"] == "a"


def test_names_follow_the_release(render: Render) -> None:
    objects = render(POOL, name="prod")
    assert one(objects, "StatefulSet")["metadata"]["name"] == "prod-joulie-agent-pool"
    objects = render(POOL, name="joulie-prod")  # already contains the chart name
    assert one(objects, "StatefulSet")["metadata"]["name"] == "joulie-prod-agent-pool"


# --- services and monitoring ------------------------------------------------


@BOTH_MODES
def test_metrics_service_has_scrape_annotations(render: Render, mode: str) -> None:
    objects = render({"agent": {"mode": mode}})
    service = one(objects, "Service", f"{RELEASE}-agent-metrics")
    assert service["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8080",
        "prometheus.io/path": "/metrics",
    }
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = agent_workload(objects)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_metrics_service_can_be_disabled(render: Render) -> None:
    for mode in ("daemonset", "pool"):
        objects = render({"agent": {"mode": mode, "service": {"enabled": False}}})
        assert find(objects, "Service", f"{RELEASE}-agent-metrics") == []
    # The StatefulSet still needs its headless service.
    assert one(render({"agent": {"mode": "pool", "service": {"enabled": False}}}), "StatefulSet")


def test_service_monitor_only_when_enabled(render: Render) -> None:
    assert find(render(), "ServiceMonitor") == []
    assert find(render(POOL), "ServiceMonitor") == []
    objects = render(
        {
            "agent": {"mode": "pool"},
            "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
        }
    )
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    selector = monitor["spec"]["selector"]["matchLabels"]
    # It selects the metrics Service and not the headless one (no double scrape).
    matching = [
        s["metadata"]["name"]
        for s in find(objects, "Service")
        if selector.items() <= s["metadata"]["labels"].items()
    ]
    assert matching == [f"{RELEASE}-agent-metrics"]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_service_monitor_without_service_is_refused(chart: Any, helm: Any) -> None:
    values = {"serviceMonitor": {"enabled": True}, "agent": {"service": {"enabled": False}}}
    with pytest.raises(helm.HelmRenderError, match=r"agent\.service\.enabled"):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


# --- RBAC -------------------------------------------------------------------

CONTRACT_RULES = {
    ("", "nodes"): ["get", "list", "watch"],
    ("joulie.io", "nodepowerprofiles"): ["get", "list", "watch"],
    ("joulie.io", "telemetryprofiles"): ["get", "list", "watch"],
    ("joulie.io", "telemetryprofiles/status"): ["update", "patch"],
}
NODETWIN_RULES = {
    ("", "nodes"): ["get", "list", "watch"],
    # A TelemetryProfile targeting a node still routes it where that CRD exists.
    ("joulie.io", "telemetryprofiles"): ["get", "list", "watch"],
    ("joulie.io", "nodetwins"): ["get", "list", "watch"],
    ("joulie.io", "nodetwins/status"): ["patch"],
    ("joulie.io", "nodehardwares"): ["get", "list", "watch", "create"],
    ("joulie.io", "nodehardwares/status"): ["patch"],
}
RULES_BY_API = {
    "profiles": CONTRACT_RULES,
    "nodetwin": NODETWIN_RULES,
    "auto": {**CONTRACT_RULES, **NODETWIN_RULES},
}


def granted_rules(role: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    granted: dict[tuple[str, str], list[str]] = {}
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}  # no resourceNames, no URLs
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) not in granted
                granted[(group, resource)] = sorted(rule["verbs"])
    return granted


@pytest.mark.parametrize("api", ["auto", "nodetwin", "profiles"])
@BOTH_MODES
def test_rbac_is_exactly_what_the_api_needs(render: Render, mode: str, api: str) -> None:
    objects = render({"agent": {"mode": mode}, "joulie": {"api": api}})
    granted = granted_rules(one(objects, "ClusterRole"))
    assert granted == {k: sorted(v) for k, v in RULES_BY_API[api].items()}
    assert env_of(agent_workload(objects))["JOULIE_API"] == api


@BOTH_MODES
def test_rbac_is_exactly_the_contract(render: Render, mode: str) -> None:
    objects = render({"agent": {"mode": mode}})
    role = one(objects, "ClusterRole")
    # The default, auto, needs both APIs' permissions: discovery picks one at start.
    assert granted_rules(role) == {k: sorted(v) for k, v in RULES_BY_API["auto"].items()}
    assert env_of(agent_workload(objects))["JOULIE_API"] == "auto"

    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    account = one(objects, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    pod = agent_workload(objects)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]


def test_rbac_and_service_account_can_be_brought_by_the_user(render: Render) -> None:
    objects = render(VALUE_SETS["no-service-no-rbac"])
    for kind in ("ClusterRole", "ClusterRoleBinding", "ServiceAccount"):
        assert find(objects, kind) == []
    assert agent_workload(objects)["spec"]["template"]["spec"]["serviceAccountName"] == "existing"


# --- Grafana dashboard ------------------------------------------------------


def dashboard_json() -> dict[str, Any]:
    result: dict[str, Any] = json.loads((CHART_DIR / "dashboards" / "agentpool.json").read_text())
    return result


def test_dashboard_configmap_only_when_enabled(render: Render) -> None:
    assert find(render(), "ConfigMap") == []
    objects = render({"dashboards": {"enabled": True, "annotations": {"grafana_folder": "Joulie"}}})
    configmap = one(objects, "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "Joulie"}
    assert json.loads(configmap["data"]["agentpool.json"]) == dashboard_json()

    objects = render({"dashboards": {"enabled": True, "namespace": "monitoring"}})
    assert one(objects, "ConfigMap")["metadata"]["namespace"] == "monitoring"


def dashboard_exprs(dashboard: dict[str, Any]) -> dict[str, list[str]]:
    return {
        panel["title"]: [target["expr"] for target in panel["targets"]]
        for panel in dashboard["panels"]
    }


def test_dashboard_uses_only_real_metric_names() -> None:
    exprs = " ".join(e for panel in dashboard_exprs(dashboard_json()).values() for e in panel)
    used = set(re.findall(r"\b(?:joulie|agentpool)_[a-z_]+", exprs))
    assert used, "the dashboard queries nothing"
    known = CONTRACT_METRICS | AGENT_EXTRA_METRICS | SUPERVISOR_METRICS
    assert used <= known, used - known


def test_dashboard_has_the_promised_panels() -> None:
    exprs = dashboard_exprs(dashboard_json())
    wanted = {
        "cap vs observed power": [
            "joulie_policy_cap_watts",
            "joulie_rapl_package_total_power_watts",
        ],
        "backend mode": ["joulie_backend_mode"],
        "throttle": ["joulie_dvfs_throttle_pct"],
        "DVFS cap error": ["joulie_dvfs_cap_error_watts"],
        # Counts a reassignment only because the series is named after the policy object.
        "cap changes": ["changes(joulie_policy_cap_watts"],
        "worker restarts": ["agentpool_worker_restarts_total"],
        "workers by state": ["agentpool_workers"],
        "scrape duration": ["scrape_duration_seconds"],
    }
    for what, metrics in wanted.items():
        assert any(
            all(metric in " ".join(panel) for metric in metrics) for panel in exprs.values()
        ), f"no panel for {what}"
    ids = [panel["id"] for panel in dashboard_json()["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_panels_use_the_datasource_variable() -> None:
    dashboard = dashboard_json()
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "job", "node"} <= variables
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


# --- documentation ----------------------------------------------------------


# Maps whose keys are documented in one row of the values table.
DOCUMENTED_AS_A_WHOLE = {"env", "labels", "startupProbe", "livenessProbe", "readinessProbe"}


def leaf_keys(values: dict[str, Any], prefix: str = "") -> list[str]:
    keys: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in DOCUMENTED_AS_A_WHOLE:
            keys.extend(leaf_keys(value, f"{path}."))
        else:
            keys.append(path)
    return keys


def test_chart_readme_documents_every_value() -> None:
    readme = (CHART_DIR / "README.md").read_text()
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    missing = [key for key in leaf_keys(values) if f"`{key}`" not in readme]
    assert missing == []


# --- HTTP endpoint credentials ------------------------------------------------


@BOTH_MODES
def test_http_credentials_are_mounted_from_secrets(render: Render, mode: str) -> None:
    auth = {"caSecret": "bmc-ca", "tokenSecret": "bmc-token", "clientCertSecret": "bmc-client"}
    workload = agent_workload(render({"agent": {"mode": mode, "httpAuth": auth}}))
    env = env_of(workload)
    assert env["HTTP_CA_BUNDLE"] == "/etc/agentpool/http/ca/ca.crt"
    assert env["HTTP_TOKEN_FILE"] == "/etc/agentpool/http/token/token"
    assert env["HTTP_CLIENT_CERT"] == "/etc/agentpool/http/client/tls.crt"
    assert env["HTTP_CLIENT_KEY"] == "/etc/agentpool/http/client/tls.key"
    pod = workload["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"http-ca": "bmc-ca", "http-token": "bmc-token", "http-client": "bmc-client"}
    mounts = {m["name"]: m for m in container(workload)["volumeMounts"]}
    for name in secrets:
        assert mounts[name]["readOnly"] is True
        assert "subPath" not in mounts[name]  # a subPath mount would never see a rotation
        assert env_value_under(env, mounts[name]["mountPath"])


def env_value_under(env: dict[str, Any], directory: str) -> bool:
    return any(isinstance(v, str) and v.startswith(directory + "/") for v in env.values())


def test_no_http_credentials_by_default(render: Render) -> None:
    workload = agent_workload(render())
    assert not [k for k in env_of(workload) if k.startswith("HTTP_")]
    assert all("secret" not in v for v in workload["spec"]["template"]["spec"]["volumes"])


# --- Kubernetes versions -------------------------------------------------------


def test_the_kubernetes_floor_admits_the_oldest_tested_server(chart: Any) -> None:
    # tests/e2e installs the chart on a real 1.20 server; a floor above it refuses that.
    floor = re.fullmatch(r">=1\.(\d+)\.0-0", chart.metadata["kubeVersion"])
    assert floor is not None
    assert int(floor[1]) <= 20


def test_the_autoscaler_api_follows_the_server(render: Render) -> None:
    # Helm's offline render assumes a current server, which serves autoscaling/v2.
    lease = {"mode": "pool", "pool": {"membership": "lease", "autoscaling": {"enabled": True}}}
    hpa = one(render({"agent": lease}), "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
