"""deploy/: Kubernetes manifests, Prometheus rules and config, the Grafana dashboard.

* every YAML file parses; the manifests reference each other consistently (ports, labels,
  ConfigMap, volume, user id of the image, KEDA target);
* `promtool check rules`, `promtool check config` and `promtool test rules` pass (promtool
  comes from Debian's `prometheus` package, installed by scripts/test.sh; without it
  these tests fail);
* the dashboard is a valid Grafana JSON model;
* every metric name queried by the dashboard, the alert rules and the KEDA trigger
  exists on a running broker's /metrics, after a little traffic (durable queue messages,
  so the store's fsync histogram has samples too).

The systemd unit, its env file and the Dockerfile are checked by tests/deploy.rs.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest
import yaml

from amqp_harness import Delivery
from conftest import ROOT, SLUICE_BIN

DEPLOY = os.path.join(ROOT, "deploy")
K8S = os.path.join(DEPLOY, "k8s")
PROM = os.path.join(DEPLOY, "prometheus")
DASHBOARD = os.path.join(DEPLOY, "grafana", "sluice.json")

# The KEDA trigger's selector (the issue names this exact series).
KEDA_SELECTOR = 'sluice_channel_undelivered_messages{pattern="queues",channel="orders"}'


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def k8s_objects():
    objs = []
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        if os.path.basename(path) == "kustomization.yaml":
            continue
        for doc in load_all(path):
            objs.append((os.path.basename(path), doc))
    return objs


def find(kind, name=None):
    found = [d for _, d in k8s_objects() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert found, f"no {kind} {name or ''} in deploy/k8s"
    return found


def one(kind, name=None):
    found = find(kind, name)
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def configmap_data():
    return one("ConfigMap")["data"]


def settings_from_help():
    """Every setting's environment name, from `sluice --help` (the settings table)."""
    out = subprocess.run([SLUICE_BIN, "--help"], capture_output=True, text=True, check=True).stdout
    names = re.findall(r"^\s+env (\S+)\s+\|", out, re.M)
    assert len(names) >= 28, out
    return set(names)


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


# --------------------------------------------------------------------------- YAML


def test_every_yaml_file_parses():
    paths = sorted(glob.glob(os.path.join(DEPLOY, "**", "*.yaml"), recursive=True)
                   + glob.glob(os.path.join(DEPLOY, "**", "*.yml"), recursive=True))
    assert len(paths) >= 12, paths
    for path in paths:
        docs = load_all(path)
        assert docs, f"{path} is empty"
        for d in docs:
            assert isinstance(d, dict), path
    for name, doc in k8s_objects():
        assert doc.get("apiVersion") and doc.get("kind"), name
        assert doc["metadata"].get("name"), name


def test_kustomization_lists_every_manifest():
    kust = load_all(os.path.join(K8S, "kustomization.yaml"))[0]
    files = {os.path.basename(p) for p in glob.glob(os.path.join(K8S, "*.yaml"))} - {"kustomization.yaml"}
    assert sorted(kust["resources"]) == sorted(files)
    assert kust["namespace"] == one("Namespace")["metadata"]["name"]
    if shutil.which("kubectl") is None:
        print("kubectl not installed: `kubectl kustomize deploy/k8s` not run")
        return
    r = subprocess.run(["kubectl", "kustomize", K8S], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(r.stdout) if d)
    assert kinds == sorted(d["kind"] for _, d in k8s_objects())


def test_configmap_holds_valid_settings():
    data = configmap_data()
    known = settings_from_help() | {"RUST_LOG"}
    for k, v in data.items():
        assert k in known, f"{k} in configmap.yaml is not a setting"
        assert isinstance(v, str), f"{k}: ConfigMap values must be strings"
    # The broker accepts them (SLUICE_SHARDS comes from the StatefulSet's CPU limit).
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **data, "SLUICE_SHARDS": "2"}
    r = subprocess.run([SLUICE_BIN, "check-config"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr + r.stdout


def test_statefulset():
    sts = one("StatefulSet")
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    assert labels_match(spec["selector"]["matchLabels"], pod_labels)
    assert spec["serviceName"] in {s["metadata"]["name"] for s in find("Service")}
    (c,) = pod["containers"]

    # Settings from the ConfigMap; the data volume mounted at SLUICE_DATA_DIR.
    assert {"configMapRef": {"name": one("ConfigMap")["metadata"]["name"]}} in c["envFrom"]
    claims = {t["metadata"]["name"]: t for t in spec["volumeClaimTemplates"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    data_dir = configmap_data()["SLUICE_DATA_DIR"]
    assert any(mounts.get(n) == data_dir for n in claims), (mounts, claims, data_dir)
    for t in claims.values():
        assert t["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert t["spec"]["resources"]["requests"]["storage"]

    # Ports and probes.
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"amqp": 5672, "amqps": 5671, "admin": 8080}
    admin_port = int(configmap_data()["SLUICE_ADMIN_ADDR"].rsplit(":", 1)[1])
    assert admin_port == ports["admin"]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = c[probe]["httpGet"]
        assert get["path"] == "/healthz", probe
        assert ports.get(get["port"], get["port"]) == 8080, probe

    # Non-root, as the image's user; resources set.
    psc, csc = pod["securityContext"], c["securityContext"]
    assert psc["runAsNonRoot"] is True
    with open(os.path.join(DEPLOY, "container", "Dockerfile")) as f:
        user = re.search(r"^USER (\d+)", f.read(), re.M)
    assert user and psc["runAsUser"] == int(user.group(1)) != 0
    assert psc["fsGroup"] != 0
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"]["drop"] == ["ALL"]
    for kind in ("requests", "limits"):
        assert c["resources"][kind]["cpu"] and c["resources"][kind]["memory"], kind
    shards = next(e for e in c["env"] if e["name"] == "SLUICE_SHARDS")
    assert shards["valueFrom"]["resourceFieldRef"]["resource"] == "limits.cpu"
    assert pod["terminationGracePeriodSeconds"] >= 10


def test_services():
    pod_labels = one("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    for svc in find("Service"):
        spec = svc["spec"]
        assert labels_match(spec["selector"], pod_labels), svc["metadata"]["name"]
        ports = {p["name"]: (p["port"], p["targetPort"]) for p in spec["ports"]}
        assert ports == {"amqp": (5672, "amqp"), "amqps": (5671, "amqps"), "admin": (8080, "admin")}
    assert one("Service", "sluice")["spec"]["type"] == "ClusterIP"


def test_servicemonitor_scrapes_the_admin_port_once():
    sm = one("ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] == "admin" and ep["path"] == "/metrics"
    selected = [s for s in find("Service") if labels_match(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
    assert [s["metadata"]["name"] for s in selected] == ["sluice"]
    assert any(p["name"] == "admin" for p in selected[0]["spec"]["ports"])


def test_keda_scaledobject_scales_the_subscriber_on_the_backlog():
    so = one("ScaledObject")
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    target = so["spec"]["scaleTargetRef"]
    dep = one("Deployment", target["name"])
    assert target.get("kind", "Deployment") == "Deployment"
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0].get("env", [])}
    assert env.get("AMQP_ADDRESS") == "queues/orders"
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    md = trigger["metadata"]
    assert KEDA_SELECTOR in md["query"]
    assert float(md["threshold"]) > 0
    assert md["serverAddress"].startswith("http")
    assert so["spec"]["minReplicaCount"] <= so["spec"]["maxReplicaCount"]


# --------------------------------------------------------------------------- Prometheus


def promtool(*args):
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool not found: install Debian's `prometheus` package (scripts/test.sh does)")
    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, cwd=PROM)
    assert r.returncode == 0, f"promtool {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def test_promtool_check_rules():
    out = promtool("check", "rules", "alerts.yaml")
    assert "SUCCESS: 7 rules found" in out, out


def test_promtool_unit_tests_of_the_alerts():
    promtool("test", "rules", "alerts_test.yaml")


def test_promtool_check_scrape_config():
    promtool("check", "config", "prometheus.yml")


def test_prometheusrule_carries_the_same_groups():
    rule = one("PrometheusRule")
    alerts = load_all(os.path.join(PROM, "alerts.yaml"))[0]
    assert rule["spec"]["groups"] == alerts["groups"], "deploy/k8s/prometheusrule.yaml differs from alerts.yaml"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump({"groups": rule["spec"]["groups"]}, f)
    try:
        promtool("check", "rules", f.name)
    finally:
        os.unlink(f.name)


def alert_rules():
    return {r["alert"]: r for g in load_all(os.path.join(PROM, "alerts.yaml"))[0]["groups"] for r in g["rules"]}


def test_alerts_cover_the_issue_and_match_the_configured_limits():
    rules = alert_rules()
    data = configmap_data()
    deadline = data["SLUICE_ACK_DEADLINE_SECONDS"]
    limit = data["CONNECTORS_AMQP10_MAX_CONNECTIONS"]
    exprs = {name: " ".join(r["expr"].split()) for name, r in rules.items()}
    for counter in ("kubemq_amqp10_events_dropped_no_credit_total",
                    "kubemq_amqp10_events_store_dropped_stalled_total",
                    "kubemq_amqp10_transfers_in_dropped_total"):
        assert any(e == f"increase({counter}[5m]) > 0" for e in exprs.values()), counter
    assert exprs["SluiceOldestUnackedNearAckDeadline"] == f"sluice_channel_oldest_unacked_age_seconds > 0.8 * {deadline}"
    assert rules["SluiceOldestUnackedNearAckDeadline"]["labels"]["ack_deadline_seconds"] == deadline
    assert exprs["SluiceConnectionLimitNearlyReached"] == f"kubemq_amqp10_connections > 0.9 * {limit}"
    assert rules["SluiceConnectionLimitNearlyReached"]["labels"]["connection_limit"] == limit
    assert exprs["SluiceBacklogGrowing"].startswith("deriv(sluice_channel_undelivered_messages[10m]) > 0")
    assert rules["SluiceBacklogGrowing"]["for"] == "10m"
    assert "sluice_store_fsync_seconds_bucket" in exprs["SluiceStoreFsyncSlow"]
    for name, r in rules.items():
        assert r["labels"]["severity"] in ("warning", "critical"), name
        assert r["annotations"]["summary"] and r["annotations"]["description"], name


# --------------------------------------------------------------------------- Grafana


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_panels(dash):
    out = []
    for p in dash["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def test_dashboard_is_a_grafana_model():
    dash = load_dashboard()
    assert dash["schemaVersion"] == 39
    assert dash["title"] and dash["uid"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    ds = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['title']} overlaps another"
                cells.add((x, y))
    panels = dashboard_panels(dash)
    assert len(panels) >= 8
    for p in panels:
        assert p["type"] in ("timeseries", "stat", "gauge", "table"), p["title"]
        assert p["datasource"] == ds, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == ds and t["expr"].strip() and t["refId"], p["title"]
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == ds, v["name"]


def test_dashboard_has_the_issues_panels():
    names_by_panel = {p["title"]: set().union(*(metric_names(t["expr"]) for t in p["targets"]))
                      for p in dashboard_panels(load_dashboard())}
    used = set().union(*names_by_panel.values())
    for name in ("kubemq_amqp10_transfers_total", "sluice_link_credit", "sluice_link_unsettled",
                 "kubemq_amqp10_events_dropped_no_credit_total", "kubemq_amqp10_events_store_dropped_stalled_total",
                 "kubemq_amqp10_transfers_in_dropped_total", "sluice_channel_undelivered_messages",
                 "sluice_channel_oldest_unacked_age_seconds", "sluice_store_fsync_seconds_bucket",
                 "kubemq_amqp10_connections"):
        assert name in used, f"no panel queries {name}"
    throughput = next(p for p in dashboard_panels(load_dashboard()) if "kubemq_amqp10_transfers_total" in p["targets"][0]["expr"])
    assert "by (pattern, direction)" in throughput["targets"][0]["expr"]


# --------------------------------------------------------------------------- metric names

_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                 "offset", "bool", "inf", "nan"}


def metric_names(expr):
    """Metric names in a PromQL expression (Grafana variables allowed)."""
    e = re.sub(r"\$\{?\w+\}?", "", expr)                                   # $__rate_interval, ${var}
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', e)                              # string literals
    e = re.sub(r"\{[^}]*\}", "", e)                                        # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                                       # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in _PROMQL_WORDS:
            continue
        names.add(word)
    return names


def template_query_names(query):
    m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
    if m:
        return metric_names(m.group(1))
    m = re.fullmatch(r"\s*label_values\(\s*\w+\s*\)\s*", query)
    return set() if m else metric_names(query)


def test_metric_name_extraction():
    assert metric_names('sum by (pattern, direction) (rate(kubemq_amqp10_transfers_total{instance=~"$instance"}'
                        '[$__rate_interval]))') == {"kubemq_amqp10_transfers_total"}
    assert metric_names("deriv(a_b[10m]) > 0 and a_b > 0.8 * 60") == {"a_b"}
    assert metric_names("histogram_quantile(0.99, sum by (instance, le) (rate(x_bucket[5m]))) > 0.05") == {"x_bucket"}
    assert metric_names('x{l="and(y)"} / on (a) group_left (b) z offset 5m') == {"x", "z"}
    assert template_query_names('label_values(m{instance=~"$instance"}, channel)') == {"m"}


def queried_names():
    """{metric name: [where it is used]} over the dashboard, the alerts and KEDA."""
    where = {}
    dash = load_dashboard()
    for p in dashboard_panels(dash):
        for t in p["targets"]:
            for n in metric_names(t["expr"]):
                where.setdefault(n, []).append(f"dashboard panel {p['title']!r}")
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            for n in template_query_names(q):
                where.setdefault(n, []).append(f"dashboard variable {v['name']}")
    for name, r in alert_rules().items():
        for n in metric_names(r["expr"]):
            where.setdefault(n, []).append(f"alert {name}")
    for t in one("ScaledObject")["spec"]["triggers"]:
        for n in metric_names(t["metadata"]["query"]):
            where.setdefault(n, []).append("KEDA ScaledObject")
    return where


def exported_names(text):
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    return names


def test_every_queried_metric_exists_on_a_running_broker(broker_factory, amqp):
    b = broker_factory()
    conn = amqp.connect(b.url)
    # A queue with a backlog and a consumer holding unsettled deliveries: the
    # per-channel and per-link families get label sets (the KEDA series among them).
    snd = conn.sender("queues/orders")
    snd.wait_credit()
    for i in range(5):
        snd.send(body=f"order-{i}")
    assert all(s == Delivery.ACCEPTED for s in snd.wait_settled())
    rcv = conn.receiver("queues/orders", credit=2)
    rcv.take(2)
    # Events and events-store traffic too.
    ev_rcv = conn.receiver("events/deploy-test", credit=10)
    conn.receiver("events-store/deploy-test", credit=10)
    ev = conn.sender("events/deploy-test")
    ev.wait_credit()
    ev.send(body="tick", settle=True)
    ev_rcv.take(1)

    b.wait_metric("sluice_channel_undelivered_messages", lambda v: v == 3, pump=amqp,
                  pattern="queues", channel="orders")
    b.wait_metric("sluice_channel_outstanding_messages", lambda v: v == 2, pump=amqp,
                  pattern="queues", channel="orders")
    status, text = b.get("/metrics")
    assert status == 200
    exported = exported_names(text)

    where = queried_names()
    assert len(where) >= 12, where
    missing = {name: uses for name, uses in sorted(where.items()) if name not in exported}
    print(f"\nchecked {len(where)} metric names against /metrics")
    assert not missing, f"queried but not exported by the broker: {missing}"
    # The store's fsync histogram, which the alert rule and the dashboard read.
    assert "sluice_store_fsync_seconds_bucket" in where, sorted(where)
    # The exact series KEDA reads.
    assert re.search(r'^sluice_channel_undelivered_messages\{(?=[^}]*pattern="queues")(?=[^}]*channel="orders")'
                     r"[^}]*\} 3$", text, re.M), text
