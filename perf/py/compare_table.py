#!/usr/bin/env python3
"""Turn the JSON reports of perf/compare.sh into the compare section of perf/RESULTS.md.

usage: compare_table.py OUT_DIR RESULTS_MD ENV_LINE RHEA_CMD_SLUICE RHEA_CMD_RABBIT

Only the text between <!-- compare:begin --> and <!-- compare:end --> is replaced (the
markers are appended when missing); every other section of the file is left as it is.
"""
import math
import json
import os
import sys

BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
BROKERS = ("sluice", "rabbit")


def load(out, name, broker):
    p = os.path.join(out, f"{name}.{broker}.json")
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def num(v, digits=0):
    if v is None:
        return "–"
    if isinstance(v, (int, float)):
        if digits == 0:
            return f"{v:,.0f}"
        return f"{v:,.{digits}f}"
    return str(v)


def ratio(a, b, invert=False, lower_is_better=False):
    """sluice / RabbitMQ, cut (not rounded) to the digits shown, towards RabbitMQ's
    side: a throughput ratio of 9.97 shows as 9.9×, never as 10.0×, and a
    lower-is-better ratio of 0.204 as 0.21×."""
    if not a or not b:
        return "–"
    r = (b / a) if invert else (a / b)
    scale = 100 if r < 1 else 10
    cut = math.ceil(r * scale - 1e-9) if lower_is_better else math.floor(r * scale + 1e-9)
    cut /= scale
    return f"{cut:,.2f}×" if r < 1 else f"{cut:,.1f}×"


def short(v):
    if v is None:
        return "–"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.2f}{suffix}"
    return f"{v:.0f}"


def spread(r, key):
    """' (min–max of n)' when the scenario ran several times."""
    reps = (r or {}).get("repeats") or []
    vals = [x.get(key) for x in reps if x.get(key) is not None]
    if len(vals) < 2:
        return ""
    return f" ({short(min(vals))}–{short(max(vals))}, {len(vals)} runs)"


def lat(r, q):
    l = (r or {}).get("latency") or {}
    return l.get(q)


def main():
    out, results, env_line, rhea_s, rhea_r = sys.argv[1:6]
    runs = {}
    for name in ("idle", "events", "fanout", "queues", "events-store", "rpc", "frames", "latency"):
        runs[name] = {b: load(out, name, b) for b in BROKERS}
    # sluice only: the queue scenario with `--durability memory` (RabbitMQ's figure is "queues").
    runs["queues-memory"] = {"sluice": load(out, "queues-memory", "sluice"), "rabbit": None}
    rhea = {}
    for b in BROKERS:
        try:
            with open(os.path.join(out, f"rhea.{b}.json")) as f:
                rhea[b] = json.loads(f.read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            rhea[b] = None

    def rate(name, b, key="msgs_per_s"):
        r = runs[name][b]
        return r.get(key) if r else None

    lines = []
    w = lines.append
    w(BEGIN)
    w("## sluice vs RabbitMQ (perf/compare.sh)")
    w("")
    w(f"Measured {env_line}.")
    w("Broker and load generator share the machine's cores; both brokers run on loopback, one at a time,")
    w("driven by the same client (sluice-perf, one OS thread per connection) with identical sizes, counts and")
    w("credit. RabbitMQ runs stop after the cap (`--timeout`); their rates cover what was delivered by then.")
    w("")
    w("| scenario | measure | sluice | RabbitMQ | sluice / RabbitMQ |")
    w("|---|---|---:|---:|---:|")
    rows = [
        ("events 1→1, 100 B, pre-settled", "events", "msg/s delivered"),
        ("events 1→4 fan-out, 100 B", "fanout", "msg/s delivered (all subscribers)"),
        ("queues at-least-once, 100 B (sluice: durable, fsync group commit)", "queues", "msg/s consumed and accepted"),
        ("events-store, 100 B (RabbitMQ: a classic queue)", "events-store", "msg/s delivered"),
        ("rpc (commands), 100 B", "rpc", "round trips/s"),
    ]
    for title, name, what in rows:
        s, r = rate(name, "sluice"), rate(name, "rabbit")
        w(f"| {title} | {what} | {num(s)}{spread(runs[name]['sluice'], 'msgs_per_s')} | {num(r)} | {ratio(s, r)} |")
        if name == "queues" and runs["queues-memory"]["sluice"]:
            s = rate("queues-memory", "sluice")
            w(f"| queues at-least-once, 100 B (sluice: in memory, `--durability memory`; RabbitMQ: the run above) | {what} | "
              f"{num(s)}{spread(runs['queues-memory']['sluice'], 'msgs_per_s')} | {num(r)} | {ratio(s, r)} |")
    s, r = rate("frames", "sluice", "frames_per_s"), rate("frames", "rabbit", "frames_per_s")
    w(f"| frame pump, 8 B pre-settled transfers | FLOW+TRANSFER+other frames/s, both directions | {num(s)}"
      f"{spread(runs['frames']['sluice'], 'frames_per_s')} | {num(r)} | {ratio(s, r)} |")
    s, r = rate("frames", "sluice"), rate("frames", "rabbit")
    w(f"| frame pump | msg/s delivered | {num(s)} | {num(r)} | {ratio(s, r)} |")
    for q, label in (("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p999")):
        s, r = lat(runs["latency"]["sluice"], q), lat(runs["latency"]["rabbit"], q)
        w(f"| events latency at half of each broker's max rate | {label} µs | {num(s, 1)} | {num(r, 1)} | {ratio(s, r, lower_is_better=True)} (lower is better) |")
    rl = {b: (runs["latency"][b] or {}).get("rate_limit") for b in BROKERS}
    w(f"| (latency run rates) | msg/s offered | {num(rl['sluice'])} | {num(rl['rabbit'])} | |")
    s, r = (runs["idle"]["sluice"] or {}), (runs["idle"]["rabbit"] or {})
    w(f"| {num(s.get('connections'))} idle connections | broker RSS growth per connection, KiB | "
      f"{num(s.get('broker_rss_per_connection_kib'), 1)} | {num(r.get('broker_rss_per_connection_kib'), 1)} | "
      f"{ratio(s.get('broker_rss_per_connection_kib'), r.get('broker_rss_per_connection_kib'), lower_is_better=True)} (lower is better) |")
    w(f"| idle connections | broker RSS after, MiB | {num((s.get('broker_rss_after_kib') or 0) / 1024, 1)} | "
      f"{num((r.get('broker_rss_after_kib') or 0) / 1024, 1)} | |")
    s, r = (rhea.get("sluice") or {}).get("msgs_per_s"), (rhea.get("rabbit") or {}).get("msgs_per_s")
    w(f"| events 1→1 with **rhea** (independent client) | msg/s delivered | {num(s)} | {num(r)} | {ratio(s, r)} |")
    w("")
    w("sluice: the median run of several (range in parentheses), each on a freshly started broker; RabbitMQ:")
    w("one run per scenario on a fresh node. The machine is shared with other work, so single runs vary.")
    w("")
    w("The run that stands for each scenario, in detail (latency from send to receipt, measured in the generator; CPU seconds over the run;")
    w("`missing` = pre-settled events dropped by the broker, i.e. that met a subscriber without credit, or not")
    w("delivered before the run ended):")
    w("")
    w("| run | broker | end | sent | delivered | missing | msg/s | frames/s | p50 µs | p99 µs | p999 µs | generator CPU s | broker CPU s | wall s |")
    w("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in ("events", "fanout", "queues", "queues-memory", "events-store", "rpc", "frames", "latency"):
        for b in BROKERS:
            r = runs[name][b]
            if name == "queues-memory" and b == "rabbit":
                continue
            if not r:
                w(f"| {name} | {b} | no result | | | | | | | | | | | |")
                continue
            cpu = r.get("cpu") or {}
            w(f"| {name} | {b} | {r.get('end')} | {num(r.get('sent'))} | {num(r.get('received'))} | "
              f"{num(r.get('missing'))} | {num(r.get('msgs_per_s'))} | {num(r.get('frames_per_s'))} | "
              f"{num(lat(r, 'p50_us'), 1)} | {num(lat(r, 'p99_us'), 1)} | {num(lat(r, 'p999_us'), 1)} | "
              f"{num(cpu.get('generator_s'), 2)} | {num(cpu.get('broker_s'), 2)} | {num(cpu.get('wall_s'), 2)} |")
    for b in BROKERS:
        r = rhea.get(b)
        if r:
            w(f"| rhea events | {b} | | {num(r.get('sent'))} | {num(r.get('received'))} | {num(r.get('dropped'))} | "
              f"{num(r.get('msgs_per_s'))} | | | | | | | {num(r.get('seconds'), 2)} |")
    errs = []
    for name, by in runs.items():
        for b, r in by.items():
            for e in (r or {}).get("errors") or []:
                errs.append(f"{name} on {b}: {e}")
    if errs:
        w("")
        w("Errors reported by the runs:")
        w("")
        for e in errs:
            w(f"- `{e}`")
    w("")
    w("Frames are counted by walking the frame headers of every byte the generator writes and reads")
    w("(TRANSFER, FLOW, DISPOSITION, other performatives and empty frames, both directions; a")
    w("multi-frame message counts each frame), divided by the time from the first send to the last")
    w("delivery or outcome. It is the broker's frame rate as seen on its sockets: every frame the")
    w("generator wrote the broker decoded, every frame it read the broker encoded.")
    w("")
    w("Exact commands (ports are picked free at each run):")
    w("")
    w("```sh")
    for name in ("idle", "events", "fanout", "queues", "queues-memory", "events-store", "rpc", "frames", "latency"):
        for b in BROKERS:
            r = runs[name][b]
            if r:
                if name == "queues-memory":
                    w("# sluice started with --durability memory for this one")
                w(r.get("command", ""))
    w(rhea_s)
    w(rhea_r)
    w("```")
    w(END)
    section = "\n".join(lines) + "\n"

    try:
        with open(results) as f:
            text = f.read()
    except OSError:
        text = "# sluice performance results\n\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(results, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
