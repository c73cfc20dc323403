"""Render a daemon's status reply as a human-readable table (stdlib only, for `rfclassify status`)."""

from __future__ import annotations

from typing import Any

#: tegrastats prints a line a second; older than this, the Jetson line says how old it is
STALE_TELEMETRY_S = 5.0


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if not 0 <= seconds < 1e12:   # Infinity, NaN or negative (json reads them): int() of it was a traceback
        return f"{seconds:g} s"
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d " if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _num(v: float | None, spec: str) -> str:
    """v formatted by spec, "?" for None: the daemon sends a NaN or infinity as null (since the
    seventy-first session), and the table showed such a reply as "not a status this version reads"."""
    return "?" if v is None else format(v, spec)


def _curve_text(st: dict[str, Any]) -> str | None:
    """The `security` line: which sockets use CURVE and how many client keys are admitted
    (one set for every socket the daemon is the CURVE server of); None for a daemon that does
    not say (before the seventy-first session)."""
    sockets = {name: st.get(name) or {} for name in ("input", "output", "control")}
    if not any("curve" in s for s in sockets.values()):
        return None
    on = {name: s["curve"] for name, s in sockets.items() if s.get("curve")}
    if not on:
        return "no CURVE: input, output and control are plaintext"
    line = "CURVE on " + ", ".join(name + (" (as the front end's client)" if c.get("role") == "client" else "")
                                   for name, c in on.items())
    servers = [c for c in on.values() if c.get("role") != "client"]
    if servers:
        n = servers[0].get("admitted_keys")
        line += ("; any client that knows the daemon's public key" if n is None else
                 f"; {n} client key{'s' if n != 1 else ''} admitted" + (" (every client refused)" if n == 0 else ""))
    off = [name for name in sockets if name not in on]
    return line + (f"; plaintext: {', '.join(off)}" if off else "")


def _handshake_text(st: dict[str, Any]) -> str | None:
    """The `handshakes` line, only where a handshake failed on the input or output socket
    ("input: 12 failed (socket_type 12), the last 3 s ago; 0 succeeded"); None otherwise and for
    daemons before the seventy-first session, which did not count them."""
    parts = []
    for role in ("input", "output"):
        h = (st.get(role) or {}).get("handshakes")
        if not isinstance(h, dict) or not h.get("failed_total"):
            continue
        age = h.get("last_failed_age_s")
        parts.append(f"{role}: {h['failed_total']} failed ({_kv(h.get('failed'))})"
                     + (f", the last {_num(age, '.0f')} s ago" if isinstance(age, (int, float)) else "")
                     + f"; {h.get('succeeded', 0)} succeeded")
    return "; ".join(parts) or None


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100


def _kv(d: dict[str, Any] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in (d or {}).items()) or "none"


def _sequence_net_notes(ref: dict[str, Any]) -> str:
    """' (equalized front, fitted carrier)': how the refiner's sequence network differs from the
    shipped kind (clocked front, lines carrier pass); '' where it does not."""
    notes = ([f"{ref['sequence_net_front']} front"] if ref.get("sequence_net_front", "clocked") != "clocked" else [])
    notes += ["fitted carrier"] if ref.get("sequence_net_carrier", "lines") == "fit" else []
    return f" ({', '.join(notes)})" if notes else ""


def render_status(st: dict[str, Any]) -> str:
    """The table `rfclassify status` prints."""
    lines: list[str] = []
    add = lines.append
    reasons = st.get("health_reasons") or []
    add(f"health      {st.get('health', '?').upper()}" + (f"  ({'; '.join(reasons)})" if reasons else ""))
    eng = st.get("engine") or {}
    if eng:
        dev = eng.get("device", "?") + (f", DLA core {eng['dla_core']}" if eng.get("dla_core") is not None else "")
        add(f"engine      {eng.get('backend')} {eng.get('precision')} on {dev}")
        add(f"model       {eng.get('model')}  (unknown below p={eng.get('unknown_threshold')})")
        ref, low = eng.get("refiner"), eng.get("low_order_refiner")
        low_text = "" if not low else (f"{len(low.get('classes') or [])} low-order classes from their invariants, "
                                       f"bursts of >= {low.get('min_samples')} samples")
        if ref:
            add(f"refiner     on: re-decides {len(ref.get('classes') or [])} high-order classes, bursts of "
                f">= {ref.get('min_samples')} samples"
                + (", with its sequence network" if ref.get("sequence_net_params") else "")
                + _sequence_net_notes(ref)
                + (", equalized scores" if ref.get("equalizer_classes") else "")
                + (f", {ref['rate_rule'].replace('_', '-')} clock"
                   if ref.get("rate_rule", "strongest_line") != "strongest_line" else ""))
            if low:
                add(f"            and {low_text}")
        else:
            add(f"refiner     on: re-decides {low_text}" if low else "refiner     off (the network decides alone)")
        if ref or low:
            workers = eng.get("refiner_workers") or 0
            where = f"in {workers} worker process{'es' if workers != 1 else ''}" if workers else "in the inference thread"
            breaks = eng.get("refiner_pool_breaks") or 0
            broke = f" (worker pool broke {breaks} time{'s' if breaks != 1 else ''})" if breaks else ""
            add(f"            its statistics {where}{broke}")
            skip = eng.get("refiner_skip_above")
            if skip is not None and skip < 1:
                least = eng.get("refiner_skip_min_samples") or 0
                add(f"            a burst {f'of >= {least} samples ' if least else ''}the network puts above "
                    f"p={skip:g} keeps its answer (no refiner, no dc pass)")
                counts = eng.get("refiner_skip_counts")
                if counts and counts.get("long_enough"):
                    n, kept = counts["long_enough"], counts.get("skipped", 0)
                    add(f"            so far {kept} of {n} bursts{f' of >= {least} samples' if least else ''} "
                        f"({100 * kept / n:.1f}%)")
        if eng.get("dc_pass"):
            add("dc pass     on: receiver DC offsets found and taken out before the refiners")
    add(f"uptime      {_fmt_duration(st.get('uptime_s', 0))}  (pid {st.get('pid')}, v{st.get('version')})")
    inp, out = st.get("input") or {}, st.get("output") or {}
    cut = f", cut by {inp['cut_mode']}" if inp.get("format") == "gr-stream" and inp.get("cut_mode") else ""
    add(f"input       {inp.get('endpoint')} ({inp.get('format')}, {inp.get('mode')}"
        f" {'bind' if inp.get('bind') else 'connect'}{cut})")
    add(f"output      {out.get('endpoint')}" + (f" ({out['format']})" if out.get("format", "json") != "json" else ""))
    curve = _curve_text(st)
    if curve:
        add(f"security    {curve}")
    failing = _handshake_text(st)
    if failing:
        add(f"handshakes  {failing}")
    c = st.get("counters") or {}
    add(f"bursts      received {c.get('received', 0)}, classified {c.get('classified', 0)}, "
        f"published {c.get('published', 0)}  ({c.get('messages', 0)} messages)")
    add(f"rejected    {c.get('rejected_total', 0)}: {_kv(c.get('rejected'))}")
    add(f"dropped     {c.get('dropped_total', 0)}: {_kv(c.get('dropped'))}  (policy {st.get('overload_policy')})")
    if st.get("decoder"):
        add(f"decoder     {_kv(st['decoder'])}")
    q = st.get("queues") or {}
    if q:
        add(f"queues      ingest {q.get('ingest')} ({q.get('ingest_bytes', 0) / 1e6:.1f} MB), "
            f"batching {q.get('batching')}, infer {q.get('infer_batches')} batches "
            f"({q.get('infer_bytes', 0) / 1e6:.1f} MB held past ingest), publish {q.get('publish')}")
    cap = st.get("capture")
    if cap:
        failed = (f", {cap['failed']} failed (last: {cap.get('last_error') or '?'})" if cap.get("failed") else "")
        add(f"capture     {', '.join(cap.get('labels') or [])} -> {cap.get('dir')}: {cap.get('kept', 0)} kept, "
            f"{cap.get('skipped', 0)} skipped{failed}; {cap.get('recordings', 0)} recordings, "
            f"{cap.get('bytes', 0) / 1e6:.1f} of {cap.get('max_bytes', 0) / 1e6:.0f} MB")
    add(f"throughput  {_num(st.get('throughput_bursts_per_s', 0), '.1f')} bursts/s")
    lat = st.get("latency_ms") or {}
    if lat:
        add("latency ms  " + "stage      p50      p90      p99")
        for stage in ("queue", "infer", "total"):
            p = lat.get(stage) or {}
            add(f"            {stage:<7}{_ms(p.get('p50')):>8} {_ms(p.get('p90')):>8} {_ms(p.get('p99')):>8}")
    per_class = st.get("per_class") or {}
    if per_class:
        top = list(per_class.items())[:10]
        more = len(per_class) - len(top)
        add("classes     " + ", ".join(f"{k} {v}" for k, v in top) + (f", +{more} more" if more > 0 else ""))
    acc = st.get("accuracy")
    if acc:
        add(f"accuracy    {_num(_pct(acc['overall']), '.1f')}% of {acc['n']} bursts with ground truth "
            f"(best guess {_num(_pct(acc.get('best_guess', 0)), '.1f')}%)")
        bands = acc.get("per_snr_db") or {}
        if bands:
            add("  by SNR dB " + ", ".join(f"{k}: {_num(_pct(v['accuracy']), '.0f')}% (n={v['n']})"
                                         for k, v in bands.items()))
    hb = st.get("heartbeat_age_s")
    if hb is not None:
        add(f"heartbeat   {hb:.2f} s ago")
    j = st.get("jetson")
    if j:
        mode = (j.get("power_mode") or {}).get("name", "?")
        temps = ", ".join(f"{k} {_num(v, '.1f')}C" for k, v in (j.get("temps_c") or {}).items())
        power = ", ".join(f"{k} {v['cur_mw']} mW" for k, v in (j.get("power_mw") or {}).items())
        age = j.get("age_s", 0.0)             # absent from daemons before the fifty-eighth session
        stale = "  (no tegrastats line yet)" if age is None else (f"  (its last line {age:.0f} s old)"
                                                                  if age > STALE_TELEMETRY_S else "")
        add(f"jetson      power mode {mode}, GPU load {j.get('gpu_load_pct', '?')}%, "
            f"RAM {j.get('ram_used_mb', '?')}/{j.get('ram_total_mb', '?')} MB{stale}")
        if temps:
            add(f"  temps     {temps}")
        if power:
            add(f"  power     {power}")
    return "\n".join(lines)
