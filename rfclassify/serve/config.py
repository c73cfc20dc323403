"""The daemon's configuration: a TOML file -> frozen dataclasses, validated once.

Every mistake in the file (unknown key, wrong type, value out of range) becomes one line of
a single ConfigError, so an operator fixes them all in one pass. Command-line options are
applied on top of the file (`apply_overrides`) and win. `systemd/rfclassify.toml` documents
every key; `reloadable_changes` says which of them SIGHUP may change in a running daemon.
"""

from __future__ import annotations

import dataclasses
import os
import math
import sys
import types
import typing
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rfclassify._cpus import MAX_REFINER_WORKERS, MAX_THREADS
from rfclassify._exceptions import ConfigError, quoted
from rfclassify._numbers import as_finite_float

INPUT_FORMATS = ("native", "gr-stream", "gr-pdu")
GNU_RADIO_INPUT_FORMATS = ("gr-stream", "gr-pdu")   # GNU Radio's zeromq sinks: gr-zeromq has no CURVE
OUTPUT_FORMATS = ("json", "gr-pmt")
INPUT_MODES = ("sub", "pull")
CUT_MODES = ("energy", "tags", "start_end")
DC_BLOCK_SAMPLES = 65536   # stream input's DC blocker time constant unless configured (also raw files in classify)
OVERLOAD_POLICIES = ("drop_oldest", "drop_newest", "block")
# engine.select's BACKEND_CHOICES / PRECISION_CHOICES, spelled out: importing it pulls numpy in
BACKENDS = ("auto", "tensorrt", "torch", "onnxruntime")
PRECISIONS = ("auto", "int8", "fp16", "fp32")
LOG_LEVELS = ("debug", "info", "warning", "error")
# "" and rfclassify.dsp.symbol_clock.RATE_RULES, written out so that reading a config does not
# import the dsp code (a test keeps them equal)
REFINER_RATE_RULES = ("", "strongest_line", "alphabet_fit", "alphabet_fit_3", "strongest_line_low_snr",
                      "alphabet_fit_3_low_snr", "coherence", "coherence_cyclic")

MiB = 1024 * 1024


def _check(choices: tuple[Any, ...] | None = None, lo: float | None = None,
           hi: float | None = None) -> dict[str, Any]:
    """Field metadata read by the validator: allowed choices and/or an inclusive range."""
    return {"choices": choices, "lo": lo, "hi": hi}


@dataclass(frozen=True, kw_only=True)
class CutterConfig:
    """gr-stream input's energy detector and burst-length limits ([cutter]; rfclassify.serve.burst_cutter)."""

    block_samples: int = field(default=32, metadata=_check(lo=1, hi=65536))
    threshold_db: float = field(default=6.0, metadata=_check(lo=0.0, hi=100.0))
    floor_percentile: float = field(default=10.0, metadata=_check(lo=0.0, hi=100.0))
    epoch_blocks: int = field(default=64, metadata=_check(lo=1, hi=1 << 20))
    history_blocks: int = field(default=4096, metadata=_check(lo=1, hi=1 << 24))
    floor_min_db: float = field(default=-120.0, metadata=_check(lo=-400.0, hi=100.0))
    hangover_samples: int = field(default=256, metadata=_check(lo=0, hi=2**31 - 1))
    min_burst_samples: int = field(default=64, metadata=_check(lo=1, hi=2**31 - 1))
    max_burst_samples: int = field(default=1 << 20, metadata=_check(lo=1, hi=2**31 - 1))
    pad_samples: int = field(default=32, metadata=_check(lo=0, hi=2**31 - 1))

    def __post_init__(self) -> None:
        if self.block_samples < 1:
            raise ConfigError(f"block_samples must be >= 1, got {self.block_samples}")
        if not 0.0 <= self.floor_percentile <= 100.0:
            raise ConfigError(f"floor_percentile must be in 0..100, got {self.floor_percentile}")
        if self.epoch_blocks < 1 or self.history_blocks < self.epoch_blocks:
            raise ConfigError("need epoch_blocks >= 1 and history_blocks >= epoch_blocks")
        if self.hangover_samples < 0 or self.pad_samples < 0:
            raise ConfigError("hangover_samples and pad_samples must be >= 0")
        if not 1 <= self.min_burst_samples <= self.max_burst_samples:
            raise ConfigError("need 1 <= min_burst_samples <= max_burst_samples")


@dataclass(frozen=True)
class InputConfig:
    endpoint: str = "tcp://127.0.0.1:5555"
    mode: str = field(default="sub", metadata=_check(INPUT_MODES))
    bind: bool = False
    format: str = field(default="native", metadata=_check(INPUT_FORMATS))
    subscribe: str = ""
    rcvhwm: int = field(default=1000, metadata=_check(lo=1, hi=1_000_000))
    max_message_bytes: int = field(default=64 * MiB, metadata=_check(lo=1024, hi=2**31 - 1))
    zmq_max_message_bytes: int = field(default=256 * MiB, metadata=_check(lo=1024, hi=2**31 - 1))
    sample_rate_hz: float = field(default=0.0, metadata=_check(lo=0.0))   # 0: unknown (GNU Radio)
    # GNU Radio: the centre frequency (Hz) of bursts whose PDU or stream tags carry none; 0: unknown
    center_freq_hz: float = field(default=0.0, metadata=_check(lo=0.0))
    stream: str = ""                                                       # default stream name
    cut_mode: str = field(default="energy", metadata=_check(CUT_MODES))
    tag_key: str = "packet_len"
    start_tag: str = "squelch_sob"    # cut_mode "start_end": GNU Radio's power squelch writes these two
    end_tag: str = "squelch_eob"
    idle_flush_s: float = field(default=0.5, metadata=_check(lo=0.01, hi=60.0))
    # gr-stream: time constant (samples) of the DC blocker before cutting; 0 = off
    dc_block_samples: int = field(default=DC_BLOCK_SAMPLES, metadata=_check(lo=0, hi=2**31 - 1))
    # gr-stream: gr_complex samples per item, the sink's vlen (after a stream_to_vector); 1 = a plain stream
    vlen: int = field(default=1, metadata=_check(lo=1, hi=1 << 20))
    # gr-stream: whether the sink's frames start with gr-zeromq's tag header (the sink's pass_tags):
    # true, false, or "auto" (the first frame decides for the daemon's run; true with a tag cut_mode)
    pass_tags: bool | str = field(default="auto", metadata=_check(("auto", True, False)))


@dataclass(frozen=True)
class OutputConfig:
    endpoint: str = "tcp://127.0.0.1:5556"
    bind: bool = True
    # "json": [topic, json] (DESIGN.md); "gr-pmt": one frame, the record as a serialized PMT dict
    # with its topic under "topic", what GNU Radio's zeromq.sub_msg_source reads
    format: str = field(default="json", metadata=_check(OUTPUT_FORMATS))
    sndhwm: int = field(default=10000, metadata=_check(lo=1, hi=10_000_000))
    # the most bytes a record may have on the wire; past it its echoed `meta` is cut (a reject's
    # `detail`), so a subscriber that stops reading holds at most sndhwm x this (publish.fit_record).
    # The default cuts no record a native message can make (its header is at most 64 KiB, JSON
    # escapes at most triple it): the contract echoes `meta`; GNU Radio PDU metadata past it is cut
    max_record_bytes: int = field(default=256 * 1024, metadata=_check(lo=1024, hi=2**31 - 1))


@dataclass(frozen=True)
class ControlConfig:
    endpoint: str = ""          # empty: ipc:///run/rfclassify/control or a per-user fallback


@dataclass(frozen=True)
class ModelConfig:
    dir: str = ""               # empty: the shipped models/ ($RFCLASSIFY_MODEL_DIR wins)
    backend: str = field(default="auto", metadata=_check(BACKENDS))
    precision: str = field(default="auto", metadata=_check(PRECISIONS))
    device: str = ""            # "" = chosen with the backend; else cpu, cuda or cuda:N (engine.devices)
    unknown_threshold: float = field(default=-1.0, metadata=_check(lo=-1.0, hi=1.0))  # <0: model's
    threads: int = field(default=0, metadata=_check(lo=0, hi=MAX_THREADS))   # CPU backend threads; 0: all
    # TensorRT only: the DLA core its engines run on (GPU fallback); -1: the GPU. 0..1: an AGX Orin
    # has two; the backend also checks the count TensorRT reports on the device it runs on
    dla_core: int = field(default=-1, metadata=_check(lo=-1, hi=1))
    engine_cache: str = ""      # TensorRT's engine cache; "": $STATE_DIRECTORY/engines under systemd, else ~/.cache
    warmup: bool = True
    refiner: bool = True        # the model's constellation refiner, when it has one (CPU, per burst)
    # processes for its statistics; 0: the inference thread; -1: all cores but two, at least two
    # (none on one core; _cpus.auto_refiner_workers)
    refiner_workers: int = field(default=-1, metadata=_check(lo=-1, hi=MAX_REFINER_WORKERS))
    refiner_sequence: bool = True   # false: the refiner's light variant (invariants only, about half the CPU)
    # "": the model's serving rule (model.json refiner.serve_rate_rule), else the refiner's own;
    # else the blind clock's rule for its bursts (symbol_clock.RATE_RULES)
    refiner_rate_rule: str = field(default="", metadata=_check(REFINER_RATE_RULES))
    # 0: the model's count (model.json refiner.serve_em_classes, else the fit's); else how many of
    # the network's top classes get the refiner's EM scores fitted (a refiner without them ignores it)
    refiner_em_classes: int = field(default=0, metadata=_check(lo=0, hi=64))
    dc_pass: bool = True        # with the refiners: each burst's receiver DC offset found and taken out first
    # a burst whose network top probability is above this skips the DC pass and the refiners (its
    # answer the network's); <0: the model's (model.json refiner_skip_above); 1: none skips them
    refiner_skip_above: float = field(default=-1.0, metadata=_check(lo=-1.0, hi=1.0))
    low_order_refiner: bool = True  # the model's low-order refiner, when it has one (false: its CPU back)


@dataclass(frozen=True)
class BucketBatching:
    max_batch: int = field(default=64, metadata=_check(lo=1, hi=4096))
    max_wait_ms: float = field(default=2.0, metadata=_check(lo=0.0, hi=60_000.0))


@dataclass(frozen=True)
class BatchingConfig:
    max_batch: int = field(default=64, metadata=_check(lo=1, hi=4096))   # windows per batch
    max_wait_ms: float = field(default=2.0, metadata=_check(lo=0.0, hi=60_000.0))
    buckets: dict[str, BucketBatching] = field(default_factory=dict)     # per-bucket overrides

    def for_bucket(self, bucket_samples: int) -> BucketBatching:
        return self.buckets.get(str(bucket_samples), BucketBatching(self.max_batch, self.max_wait_ms))

    def unused_overrides(self, model_buckets: tuple[int, ...]) -> list[str]:
        """A warning for each [batching.buckets.N] the model has no bucket N for (a typo such
        as 1042, or a table written for another model): it is never read."""
        return [f"batching.buckets.{name}: the model has no {name}-sample bucket (its buckets: "
                f"{', '.join(map(str, model_buckets))}); this override is unused"
                for name in self.buckets if int(name) not in model_buckets]


@dataclass(frozen=True)
class QueueConfig:
    ingest_max_bursts: int = field(default=4096, metadata=_check(lo=1, hi=10_000_000))
    ingest_max_bytes: int = field(default=64 * MiB, metadata=_check(lo=MiB, hi=2**40))
    infer_max_batches: int = field(default=4, metadata=_check(lo=1, hi=1024))
    # bytes of the bursts past the ingest queue (the batcher's, the infer queue's, the batch being
    # inferred: samples, message and windows); the batcher takes no burst beyond it. 0: ingest_max_bytes
    infer_max_bytes: int = field(default=0, metadata=_check(lo=0, hi=2**40))
    publish_max_records: int = field(default=20000, metadata=_check(lo=1, hi=10_000_000))
    publish_max_bytes: int = field(default=64 * MiB, metadata=_check(lo=MiB, hi=2**40))
    overload: str = field(default="drop_oldest", metadata=_check(OVERLOAD_POLICIES))

    @property
    def infer_bytes_limit(self) -> int:
        """infer_max_bytes, or ingest_max_bytes where it is 0."""
        return self.infer_max_bytes or self.ingest_max_bytes


@dataclass(frozen=True)
class ShutdownConfig:
    drain_timeout_s: float = field(default=10.0, metadata=_check(lo=0.0, hi=600.0))


@dataclass(frozen=True)
class HealthConfig:
    heartbeat_stale_s: float = field(default=10.0, metadata=_check(lo=0.5, hi=3600.0))
    drop_window_s: float = field(default=60.0, metadata=_check(lo=1.0, hi=3600.0))
    error_window_s: float = field(default=3600.0, metadata=_check(lo=1.0, hi=30 * 86400.0))
    tegrastats: bool = True


@dataclass(frozen=True)
class LoggingConfig:
    level: str = field(default="info", metadata=_check(LOG_LEVELS))


@dataclass(frozen=True)
class MetricsConfig:
    listen: str = ""            # "127.0.0.1:9108" turns the Prometheus endpoint on


@dataclass(frozen=True)
class SecurityConfig:
    secret_key_file: str = ""           # the daemon's CURVE key pair (zmq.auth .key_secret file)
    input_server_key_file: str = ""     # the front end's public key, where the front end is the CURVE server
    authorized_keys_dir: str = ""       # client public keys allowed on bound sockets
    curve_input: bool = False
    curve_output: bool = False
    curve_control: bool = False


@dataclass(frozen=True)
class CaptureConfig:
    """Bursts kept on disk as SigMF recordings by their result's label (rfclassify.serve.capture)."""

    dir: str = ""               # "": keep none
    labels: str = "unknown"     # comma-separated result labels to keep ("unknown", "NOISE", ...); "*": every result
    max_bytes: int = field(default=1024 * MiB, metadata=_check(lo=MiB, hi=2**50))   # the oldest go beyond it


@dataclass(frozen=True)
class DaemonConfig:
    input: InputConfig = field(default_factory=InputConfig)
    cutter: CutterConfig = field(default_factory=CutterConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    queues: QueueConfig = field(default_factory=QueueConfig)
    shutdown: ShutdownConfig = field(default_factory=ShutdownConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)


def _type_name(t: Any) -> str:
    if isinstance(t, types.UnionType):   # input.pass_tags: bool | str was "expected bool | str"
        return " or ".join(map(_type_name, t.__args__))
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(t, str(t))


def _choices_text(choices: tuple[Any, ...], value: Any) -> str:
    """The allowed values, and the one given, as the file spells them. Where a choice is a boolean
    (input.pass_tags) that is TOML: true, false and quoted strings, not Python's True and False."""
    if not any(isinstance(c, bool) for c in choices):
        return f"must be one of {', '.join(map(str, choices))}; got {value!r}"
    words = [str(c).lower() if isinstance(c, bool) else quoted(c) for c in choices]
    text = f"must be {', '.join(words[:-1])} or {words[-1]}; got {quoted(value)}"
    if isinstance(value, str) and value.lower() in ("true", "false"):
        text += f" (a string: write {value.lower()} without quotes)"
    return text


def _coerce(value: Any, kind: type, where: str, errors: list[str]) -> Any:
    """Check one scalar against its declared type (TOML ints are fine where floats are wanted)."""
    ok = (isinstance(value, kind) and not (kind is int and isinstance(value, bool))) or (
        kind is float and isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        errors.append(f"{where}: expected {_type_name(kind)}, got {type(value).__name__} {quoted(value)}")
        return None
    if kind is float:
        number = as_finite_float(value)
        if number is None:
            # TOML has nan and inf, and Python's reader takes integers past float range
            errors.append(f"{where}: must be a finite number; got {quoted(value)}")
        return number
    return value


def _check_value(value: Any, meta: Any, where: str, errors: list[str]) -> bool:
    choices, lo, hi = meta.get("choices"), meta.get("lo"), meta.get("hi")
    if isinstance(value, str) and "\0" in value:
        # TOML's "\u0000": no path, endpoint or label holds one (capture.dir ended the start in
        # a ValueError traceback before the sixty-sixth session)
        errors.append(f"{where}: must not contain a NUL character")
        return False
    if isinstance(value, float) and not math.isfinite(value):
        # TOML has nan and inf; a NaN passes every range test (a NaN max_wait_ms never sends a batch)
        errors.append(f"{where}: must be a finite number; got {value!r}")
        return False
    if choices is not None and value not in choices:
        errors.append(f"{where}: {_choices_text(choices, value)}")
        return False
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        rng = f"{lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'}"
        errors.append(f"{where}: must be in {rng}; got {value!r}")
        return False
    return True


def _build(cls: type, data: Any, where: str, errors: list[str]) -> Any:
    """Make dataclass `cls` from a TOML table, appending one message per mistake to errors."""
    if not isinstance(data, dict):
        errors.append(f"{where}: expected a table, got {type(data).__name__}")
        return cls()
    if cls is BatchingConfig and "buckets" in data:
        # the per-bucket tables inherit from the rest of [batching], so build that first
        batching = _build(cls, {k: v for k, v in data.items() if k != "buckets"}, where, errors)
        return replace(batching, buckets=_build_buckets(data["buckets"], f"{where}.buckets", batching, errors))
    known = {f.name: f for f in fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        here = f"{where}.{key}" if where else key
        f = known.get(key)
        if f is None:
            errors.append(f"{here}: unknown key (known: {', '.join(known)})")
            continue
        ftype = hints[key]
        if dataclasses.is_dataclass(ftype):
            kwargs[key] = _build(ftype, value, here, errors)
        else:
            v = _coerce(value, ftype, here, errors)
            if v is not None and _check_value(v, f.metadata, here, errors):
                kwargs[key] = v
    try:
        return cls(**kwargs)
    except ConfigError as exc:   # a section's own checks of its keys together (CutterConfig's)
        errors.append(f"{where}: {exc}")
        return cls()


def _build_buckets(value: Any, where: str, batching: BatchingConfig,
                   errors: list[str]) -> dict[str, BucketBatching]:
    """Per-bucket tables; a key a table leaves out takes its [batching] value."""
    if not isinstance(value, dict):
        errors.append(f"{where}: expected a table of bucket sizes, got {type(value).__name__}")
        return {}
    base = BucketBatching(batching.max_batch, batching.max_wait_ms)
    out = {}
    for name, table in value.items():
        if not str(name).isdigit() or len(str(name)) > 9:
            errors.append(f"{where}.{name}: bucket names are sample counts such as \"1024\"")
            continue
        built = _build(BucketBatching, table, f"{where}.{name}", errors)
        given = [f.name for f in fields(BucketBatching) if isinstance(table, dict) and f.name in table]
        out[str(int(name))] = replace(base, **{k: getattr(built, k) for k in given})
    return out


#: the transports ZeroMQ names that another process can reach (inproc:// reaches only sockets of
#: the daemon's own ZeroMQ context); whether this libzmq was built with one is its business
TRANSPORTS = ("tcp", "ipc", "pgm", "epgm", "norm", "tipc", "vmci", "ws", "wss", "udp")


def _combination_errors(cfg: DaemonConfig) -> list[str]:
    """Mistakes no single field shows: endpoints, the metrics address, limits that must agree."""
    errors = []
    for name, ep in (("input.endpoint", cfg.input.endpoint), ("output.endpoint", cfg.output.endpoint),
                     ("control.endpoint", cfg.control.endpoint)):
        if (ep or name != "control.endpoint") and "://" not in ep:
            # an empty input or output endpoint failed at its bind, after the model had loaded
            errors.append(f"{name}: expected a ZeroMQ endpoint such as tcp://127.0.0.1:5555; got {ep!r}")
        elif ep.startswith("inproc://"):
            # accepted before: the daemon ran, and nothing could send to it or hear it
            errors.append(f"{name}: inproc:// is reachable only inside the daemon's own process; "
                          f"use tcp:// or ipc://; got {ep!r}")
        elif ep and ep.partition("://")[0] not in TRANSPORTS:
            # found here rather than by the bind after the model has loaded
            errors.append(f"{name}: unknown ZeroMQ transport {ep.partition('://')[0]!r:.40} "
                          f"(one of {', '.join(TRANSPORTS)}); got {ep!r:.80}")
        elif ep.startswith("tcp://"):
            # ZeroMQ takes a port past 65535 or below 0 and binds another one: a sender would never find it
            port = ep.rpartition(":")[2]
            if port != "*" and not (port.isdigit() and int(port) <= 65535):
                errors.append(f"{name}: the port must be 0..65535 or *; got {ep!r}")
    if cfg.metrics.listen:
        host, _, port = cfg.metrics.listen.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) < 65536:
            errors.append(f"metrics.listen: expected HOST:PORT such as 127.0.0.1:9108; got {cfg.metrics.listen!r}")
    if cfg.model.device:
        from rfclassify.engine.devices import device_kind

        try:     # found when the backend was chosen, after a start-up's worth of loading
            device_kind(cfg.model.device)
        except ConfigError as exc:
            errors.append(f"model.device: {exc}")
    if cfg.input.cut_mode == "tags" and not cfg.input.tag_key:   # no tag matches: no burst, no word
        errors.append("input.tag_key: must name the length tag when input.cut_mode is tags")
    for key in ("start_tag", "end_tag"):
        if cfg.input.cut_mode == "start_end" and not getattr(cfg.input, key):
            errors.append(f"input.{key}: must name a tag when input.cut_mode is start_end")
    if cfg.input.cut_mode != "energy" and cfg.input.pass_tags is False:   # no tag would reach the cut
        errors.append(f"input.pass_tags: must be true or \"auto\" when input.cut_mode is {cfg.input.cut_mode} "
                      "(the cut needs the stream's tags: set pass_tags=True on the flowgraph's sink)")
    if cfg.capture.dir:
        from rfclassify.labels import LABELS

        unknown = [name for name in capture_labels(cfg.capture.labels) if name not in (*LABELS, "unknown", "*")]
        if unknown or not capture_labels(cfg.capture.labels):
            errors.append(f"capture.labels: comma-separated result labels (unknown, {', '.join(LABELS[:3])}, ...) "
                          f"or *; got {cfg.capture.labels!r}")
    if cfg.input.max_message_bytes > cfg.input.zmq_max_message_bytes:
        errors.append("input.max_message_bytes: must not exceed input.zmq_max_message_bytes "
                      f"({cfg.input.max_message_bytes} > {cfg.input.zmq_max_message_bytes})")
    return errors


def security_errors(cfg: DaemonConfig) -> list[str]:
    """[security] settings that cannot work, one line each: curve_input with GNU Radio input,
    accepted without a word before the seventieth session (the input then received nothing,
    health `ok`). Checked on the merged config (daemon.socket_security), not on the file alone:
    a command-line --input-format can make the combination or undo it. A connecting input with
    no input_server_key_file is not one: the daemon is then the CURVE server of a connecting
    socket, which ZeroMQ allows (a front end binding as a CURVE client with its public key)."""
    s, inp = cfg.security, cfg.input
    if s.curve_input and inp.format in GNU_RADIO_INPUT_FORMATS:
        return [f"security.curve_input: input.format {inp.format} is GNU Radio's, and gr-zeromq has no CURVE; "
                "set curve_input = false (keep that link on loopback or a trusted network)"]
    return []


def security_notes(cfg: DaemonConfig) -> tuple[str, list[str]]:
    """(one line saying which sockets use CURVE, [warnings]) for the daemon's start and
    `serve --check-config`: key files set while the sockets they would protect run in clear,
    which was silent."""
    s = cfg.security
    switches = {"input": s.curve_input, "output": s.curve_output, "control": s.curve_control}
    on = [name for name, value in switches.items() if value]
    off = [name for name, value in switches.items() if not value]
    if not on:
        line = "no CURVE: input, output and control are plaintext"
    else:
        line = f"CURVE on {', '.join(on)}" + (f"; plaintext: {', '.join(off)}" if off else "")
        if s.curve_output or s.curve_control or (s.curve_input and not s.input_server_key_file):
            line += (f"; clients admitted: the keys in {s.authorized_keys_dir}" if s.authorized_keys_dir
                     else "; any client that knows the daemon's public key (no client authentication)")
        if s.curve_input and not s.input_server_key_file and not cfg.input.bind:
            line += "; the input connects as the CURVE server (the front end binds as a client with the daemon's key)"
    warnings = []
    keys = [f"security.{name}" for name in ("secret_key_file", "input_server_key_file", "authorized_keys_dir")
            if getattr(s, name)]
    if keys and not on:
        warnings.append(f"{', '.join(keys)} set, but curve_input, curve_output and curve_control are all false: "
                        "input, output and control are plaintext")
    elif s.input_server_key_file and not s.curve_input:
        warnings.append("security.input_server_key_file set, but curve_input is false: the input is plaintext")
    if s.curve_output and cfg.output.format == "gr-pmt":
        warnings.append("security.curve_output with output.format gr-pmt: GNU Radio's zeromq.sub_msg_source has "
                        "no CURVE and receives nothing")
    return line, warnings


def capture_labels(text: str) -> tuple[str, ...]:
    """[capture] labels as names: "unknown, NOISE" -> ("unknown", "NOISE")."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def config_from_dict(data: dict[str, Any], source: str = "config") -> DaemonConfig:
    """Validate a parsed TOML document; ConfigError lists every mistake, one per line."""
    errors: list[str] = []
    cfg = _build(DaemonConfig, data, "", errors)
    if not errors:
        errors = _combination_errors(cfg)
    if errors:
        raise ConfigError(f"{source}: " + f"\n{source}: ".join(errors))
    return cfg


def load_config(path: str | os.PathLike[str] | None) -> DaemonConfig:
    """Read and validate a TOML file; None gives the defaults."""
    if path is None:
        return DaemonConfig()
    if sys.version_info >= (3, 11):
        import tomllib
    else:   # Python 3.10 (JetPack 6): the same parser, as a package (pyproject installs it there)
        import tomli as tomllib

    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # not UTF-8; an integer too long for Python to read; arrays nested past the parser's depth
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return config_from_dict(data, str(path))


def apply_overrides(cfg: DaemonConfig, overrides: dict[str, Any]) -> DaemonConfig:
    """Apply 'section.key' -> value overrides (None values are skipped), validating them like the file."""
    nested: dict[str, dict[str, Any]] = {}
    for dotted, value in overrides.items():
        if value is None:
            continue
        section, key = dotted.split(".", 1)
        nested.setdefault(section, {})[key] = value
    if not nested:
        return cfg
    checked = config_from_dict(nested, "command line")
    changes = {}
    for section, values in nested.items():
        sub = getattr(checked, section)
        changes[section] = replace(getattr(cfg, section), **{k: getattr(sub, k) for k in values})
    return replace(cfg, **changes)


def check_option(option: str, key: str, value: Any, context: dict[str, Any] | None = None) -> None:
    """ConfigError naming command-line `option` where the value it gives config key `key`
    ('section.key'; with the `context` overrides beside it) is one `serve` would refuse: the
    commands that hand such a value to a daemon of their own check it as serve does."""
    try:
        apply_overrides(DaemonConfig(), {**(context or {}), key: value})
    except ConfigError as exc:
        raise ConfigError(str(exc).replace(f"command line: {key}:", f"{option}:")) from None


# What SIGHUP may change without re-creating sockets or the backend.
RELOADABLE: tuple[str, ...] = (
    "logging.level", "batching.max_batch", "batching.max_wait_ms", "batching.buckets",
    "queues.overload", "model.unknown_threshold", "health.heartbeat_stale_s",
    "health.drop_window_s", "health.error_window_s",
)


def diff_configs(old: DaemonConfig, new: DaemonConfig) -> list[str]:
    """Dotted names of the keys whose values differ."""
    changed = []
    for sec in fields(DaemonConfig):
        a, b = getattr(old, sec.name), getattr(new, sec.name)
        for f in fields(a):
            if getattr(a, f.name) != getattr(b, f.name):
                changed.append(f"{sec.name}.{f.name}")
    return changed


def reloadable_changes(old: DaemonConfig, new: DaemonConfig) -> tuple[list[str], list[str]]:
    """Split the changed keys into (applied on reload, needing a restart)."""
    changed = diff_configs(old, new)
    return [k for k in changed if k in RELOADABLE], [k for k in changed if k not in RELOADABLE]
