"""The daemon's stages as threads joined by bounded queues.

    input socket -> [ingest] -> ingest queue -> [batcher: windows + per-bucket batches]
        -> infer queue -> [inference] -> publish queue -> [publisher] -> output socket

* ingest owns the input socket and its decoder; it only decodes and enqueues, so inference
  never stalls the socket. Decoder rejects go straight to the publish queue. It also owns the
  input's socket monitor (serve/handshakes.py: failed ZeroMQ handshakes, counted for the
  health; polled with the socket, and while it waits for room with overload "block").
* batcher normalizes and windows each burst (rfclassify.dsp.windows, the model's bucket
  policy; too_short / non_finite / zero_power become rejects) and assembles batches per
  bucket (max_batch windows or max_wait_ms, whichever first). A bucket past its max_wait_ms
  is held, growing, while inference is busy with another batch or one waits for it, and
  goes as soon as inference is free (the inference thread wakes the batcher when it ends a
  batch): it would wait for inference anyway, and a larger batch keeps the refiner's worker
  processes busy (a batch's statistics run in parallel over its bursts; with 14 workers on a
  16-core GPU host the daemon reached 0.33 of the bare loop on 2 ms batches; fifty-fifth
  session). Not where the refiners run in the inference thread
  (EngineAdapter.grows_held_batches).
* inference runs the backend on a batch and turns outputs into result records (the model's
  constellation refiner included, when it has one: a refiner that fails leaves that batch
  to the network alone); it stamps the heartbeat every loop, so a hung backend shows as a
  stale heartbeat (and stops the systemd watchdog pings). The refiner is not a stage of its
  own: a thread of its own measured slower on a GPU host (docs/engine.md).
* publisher owns the output PUB socket (and its socket monitor, read every 100 ms); everyone
  else hands it records through its queue.
* with [capture], inference offers each result's burst to the capture's writer thread
  (rfclassify.serve.capture), which keeps the ones whose label it was asked for.

Only the ingest queue drops under overload (policy drop_oldest, drop_newest or block); the
infer queue blocks the batcher, which backs up into the ingest queue. So does the infer byte
budget (queues.infer_max_bytes): past the ingest queue a burst is held with its raw samples
(the refiner and the capture read them), so a batch of 64 windows of 64 MiB bursts held
256 MiB, and counting batches alone let 2.6 GB through against a 64 MiB ingest queue; the
batcher takes no burst while the budget is spent, and sends what it holds at once. The
publish queue drops its oldest record if the output cannot keep up. Every drop is counted per
stage.

A stop that gives up on its drain counts what it abandons, each burst once: the bursts in the
queues, the batcher and the batch inference is running, never classified, as dropped at stage
`shutdown`; the records already made (results counted as classified, rejects counted as
rejected) that the publisher never sent, as dropped at stage `shutdown_unsent`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import numpy as np
import zmq

from rfclassify._exceptions import MessageError, UserError
from rfclassify.dsp.windows import burst_to_windows
from rfclassify.serve.batching import Batch, BoundedQueue, BucketBatcher, ByteBudget, Pending
from rfclassify.serve.bursts import Burst, Reject
from rfclassify.serve.config import DaemonConfig
from rfclassify.serve.control import open_socket
from rfclassify.serve.decoders import Decoder, IngestConfig, make_decoder
from rfclassify.serve.handshakes import HandshakeCounts, HandshakeWatch
from rfclassify.serve.publish import fit_record, open_output_socket, publish_loop
from rfclassify.serve.results import REJECT_TOPIC, RESULT_TOPIC, encode, encode_pmt, reject_record, result_record
from rfclassify.serve.stats import DaemonStats

log = logging.getLogger(__name__)

_END = object()          # end-of-stream marker passed down the queues on shutdown
_POLL_S = 0.1            # how often idle threads look at their stop flags
#: the drop stage of records made (classified or rejected) that a stop left unsent
UNSENT_STAGE = "shutdown_unsent"


class EngineAdapter:
    """The daemon's view of a loaded Classifier: its bucket policy, identity, and batch calls."""

    def __init__(self, classifier: Any, unknown_threshold: float | None = None) -> None:
        self.classifier = classifier
        self.policy = classifier.policy
        self.backend = classifier.backend
        self.precision = classifier.precision
        self.device = classifier.device
        self.model_id = classifier.model_id
        self._model_threshold = classifier.unknown_threshold
        self.set_unknown_threshold(unknown_threshold)

    def set_unknown_threshold(self, threshold: float | None) -> None:
        """Override the model's open-set threshold (None or < 0: the model's own)."""
        t = self._model_threshold if threshold is None or threshold < 0 else float(threshold)
        self.classifier.unknown_threshold = t

    @property
    def unknown_threshold(self) -> float:
        return self.classifier.unknown_threshold

    @property
    def refines(self) -> bool:
        """Whether the Classifier has a refiner, constellation or low-order (a CPU step after the network)."""
        return bool(getattr(self.classifier, "refiners", ()))

    @property
    def grows_held_batches(self) -> bool:
        """Whether a due batch should keep growing while inference is busy: yes, unless the
        refiners run one burst after another in the inference thread. There a batch's time
        grows with its size and its results go out together, so a larger batch only holds its
        first bursts back (the demo on this 2-core CPU: total p50 1,350 against 1,180 ms); in
        worker processes a larger batch runs in parallel (docs/daemon.md, fifty-fifth session)."""
        clf = self.classifier
        return not (self.refines and not getattr(clf, "refiner_workers", 0))

    def infer_batch(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """The network's (logits, snr_db) for every window of the batch, in one backend call."""
        return self.classifier.infer_windows(batch.bucket_samples, batch.windows())

    def results_for_batch(self, batch: Batch, logits: np.ndarray, snr_db: np.ndarray,
                          refine: bool = True) -> list[Any]:
        """One ClassificationResult per burst from the batch's network outputs; the refiner
        re-decides the bursts it wants unless refine is False (the network's answer alone)."""
        return self.classifier.results_from_batch(
            logits, snr_db, [p.windows for p in batch.items], batch.bucket_samples,
            [p.burst.sample_rate_hz for p in batch.items],
            [p.burst.iq if refine else None for p in batch.items])

    def classify_batch(self, batch: Batch) -> list[Any]:
        """One ClassificationResult per burst of the batch, windows run in one backend call."""
        logits, snr_db = self.infer_batch(batch)
        return self.results_for_batch(batch, logits, snr_db)


def make_input_decoder(config: DaemonConfig) -> Decoder:
    """The ingest engineer's decoder for input.format, configured from [input]."""
    cfg = config.input
    return make_decoder(cfg.format, IngestConfig(
        max_message_bytes=cfg.max_message_bytes,
        sample_rate_hz=cfg.sample_rate_hz or None,
        center_freq_hz=cfg.center_freq_hz or None,
        stream=cfg.stream or None,
        pass_tags=None if cfg.pass_tags == "auto" else cfg.pass_tags,
        cut_mode=cfg.cut_mode,
        tag_key=cfg.tag_key,
        start_tag=cfg.start_tag,
        end_tag=cfg.end_tag,
        idle_flush_s=cfg.idle_flush_s,
        dc_block_samples=cfg.dc_block_samples,
        vlen=cfg.vlen,
        cutter=config.cutter,
    ))


def _worth_logging(count: int) -> bool:
    """Whether the count-th error of a kind that can repeat per message gets its traceback in
    the log: the first ten, then one in a thousand."""
    return count <= 10 or count % 1000 == 0


class Pipeline:
    """Owns the four stage threads; start(), then stop(drain=True) for a clean shutdown."""

    def __init__(self, config: DaemonConfig, engine: EngineAdapter, stats: DaemonStats,
                 context: zmq.Context, security: Any = None, capture: Any = None) -> None:
        self.config = config
        self.engine = engine
        self.stats = stats
        self.context = context
        self.security = security          # callable(socket, role) that applies CURVE, or None
        self.capture = capture            # a serve.capture.BurstCapture offered every result, or None
        # the output's wire format, fixed for the socket's life (a reload cannot change it)
        self._encode = encode_pmt if config.output.format == "gr-pmt" else encode
        q = config.queues
        self.ingest_q = BoundedQueue("ingest", q.ingest_max_bursts, q.ingest_max_bytes,
                                     q.overload, self._dropped)
        # its bytes are bounded with the batcher's and the running batch's by infer_budget
        self.infer_q = BoundedQueue("infer", q.infer_max_batches, 1 << 62, "block", self._dropped)
        self.infer_budget = ByteBudget(q.infer_bytes_limit)
        self.publish_q = BoundedQueue("publish", q.publish_max_records, q.publish_max_bytes,
                                      "drop_oldest", self._dropped)
        self.batcher = BucketBatcher(config.batching)
        self.heartbeat_s = time.monotonic()
        self._inferring = False           # the inference thread is running a batch
        # the batch the inference thread runs, until it records its outcome (_claim) or stop()
        # takes it as abandoned, whichever comes first: a backend call outlives stop()'s joins
        self._running: Batch | None = None
        self._publisher_gone = False      # stop() has counted what the publisher left
        self._shutdown_lock = threading.Lock()   # orders both against stop()'s count
        self.inference_errors = 0
        self.refiner_errors = 0           # batches the refiner failed on (left to the network)
        self.decoder_errors = 0           # messages the decoder raised on (rejected, internal_error)
        self.encoder_errors = 0           # records the output encoder raised on (sent as internal_error)
        self.records_cut = 0              # records over output.max_record_bytes sent cut (publish.fit_record)
        # when the last error of each kind (inference, refiner, decoder, encoder) happened
        # (time.monotonic()): the health counts an error for health.error_window_s, not for good
        self.last_error_s: dict[str, float] = {}
        self.input_endpoint = ""          # actual endpoints (a bind to port * resolves here)
        self.output_endpoint = ""
        # the input's and output's ZeroMQ handshakes, failed ones by cause (serve/handshakes.py):
        # each socket's thread watches its own socket's monitor and counts here
        self.handshakes = {"input": HandshakeCounts("input"), "output": HandshakeCounts("output")}
        self._input_watch: HandshakeWatch | None = None   # the ingest thread's, while it runs
        self._stop_ingest = threading.Event()
        self._ingest_done = threading.Event()
        self._abort = threading.Event()
        self._ready: dict[str, threading.Event] = {"ingest": threading.Event(),
                                                   "publisher": threading.Event()}
        self._errors: dict[str, BaseException] = {}
        self._threads = [
            threading.Thread(target=self._guard, args=(self._ingest_loop,), name="ingest", daemon=True),
            threading.Thread(target=self._guard, args=(self._batch_loop,), name="batcher", daemon=True),
            threading.Thread(target=self._guard, args=(self._infer_loop,), name="inference", daemon=True),
            threading.Thread(target=self._guard, args=(self._publish_loop,), name="publisher", daemon=True),
        ]
        self._decoder_stats: dict[str, float] = {}

    # -- life cycle ------------------------------------------------------------------------
    def start(self, timeout_s: float = 10.0) -> None:
        """Start the threads; raises the socket error if the input or output cannot be set up."""
        for t in self._threads:
            t.start()
        for name, ev in self._ready.items():
            ev.wait(timeout_s)
            if name in self._errors:
                self._abort.set()
                self._stop_ingest.set()
                raise self._errors[name]

    def stop(self, drain: bool = True, timeout_s: float = 10.0) -> bool:
        """Stop ingest, then (if drain) classify and publish what is queued within timeout_s.

        Returns True when every thread finished in time; otherwise the rest is abandoned and
        counted as dropped: bursts never classified at stage 'shutdown' (the batch inference
        is running too, whose outcome then goes unrecorded), records made but never sent at
        UNSENT_STAGE."""
        deadline = time.monotonic() + timeout_s
        if not drain:
            self._abort.set()
        self._stop_ingest.set()
        for t in self._threads:
            if t.ident is not None:     # a start that failed part way left the rest unstarted
                t.join(max(0.0, deadline - time.monotonic()))
        clean = not any(t.is_alive() for t in self._threads)
        if not clean:
            self._abort.set()
            for t in self._threads:
                if t.ident is not None:
                    t.join(0.5)
        # whatever is still queued was abandoned (nothing, after a clean drain); a record made
        # after this is counted where it is made (_publish), a running batch's outcome not recorded
        with self._shutdown_lock:
            running, self._running = self._running, None
            self._publisher_gone = True
            unsent = sum(1 for r in self.publish_q.drain() if r is not _END)
        lost = len(self.ingest_q.drain()) + len(self.batcher) + sum(
            len(b.items) for b in self.infer_q.drain() if isinstance(b, Batch)) + (
            len(running.items) if running is not None else 0)
        if lost:
            self.stats.add_drop("shutdown", lost)
        if unsent:
            self.stats.add_drop(UNSENT_STAGE, unsent)
        if not clean:   # the totals: the stages count what they abandon as they stop (_submit, _enqueue)
            log.warning("shutdown: drain did not finish within %.1f s; %d bursts abandoned unclassified, "
                        "%d records made but not published", timeout_s,
                        self.stats.drops("shutdown"), self.stats.drops(UNSENT_STAGE))
        return clean

    def _count_error(self, kind: str) -> int:
        """Count an error of `kind` (inference, refiner, decoder, encoder: its `<kind>_errors`
        counter) and when it happened (`last_error_s`, which the health reads); the count so far."""
        count = getattr(self, f"{kind}_errors") + 1
        setattr(self, f"{kind}_errors", count)
        self.last_error_s[kind] = time.monotonic()
        return count

    def failed_threads(self) -> list[str]:
        return sorted(self._errors)

    def queue_depths(self) -> dict[str, Any]:
        return {"ingest": len(self.ingest_q), "ingest_bytes": self.ingest_q.nbytes,
                "batching": len(self.batcher), "infer_batches": len(self.infer_q),
                "infer_bytes": self.infer_budget.held,
                "publish": len(self.publish_q), "publish_bytes": self.publish_q.nbytes}

    def held_bytes(self) -> int:
        """The bytes the queues, the batcher and the batch being inferred hold now."""
        return self.ingest_q.nbytes + self.infer_budget.held + self.publish_q.nbytes

    def take_peak_bytes(self) -> int:
        """The most bytes they held since the last call (each stage's own peak, summed)."""
        return self.ingest_q.take_peak() + self.infer_budget.take_peak() + self.publish_q.take_peak()

    def decoder_stats(self) -> dict[str, float]:
        return dict(self._decoder_stats)

    def reconfigure(self, config: DaemonConfig) -> None:
        """Apply the reloadable settings (SIGHUP): batching limits and the overload policy."""
        self.batcher.config = config.batching
        self.ingest_q.policy = config.queues.overload
        self.config = config

    # -- helpers ---------------------------------------------------------------------------
    def _guard(self, loop: Any) -> None:
        name = threading.current_thread().name
        try:
            loop()
        except zmq.ContextTerminated:
            pass
        except UserError as exc:      # e.g. an address in use: start() re-raises it, one line
            self._errors[name] = exc
        except BaseException as exc:  # noqa: BLE001 - reported through status, then re-raised in start()
            log.exception("%s thread failed", name)
            self._errors[name] = exc
        finally:
            if name in self._ready:
                self._ready[name].set()

    def _dropped(self, stage: str, item: Any) -> None:
        n = len(item.items) if isinstance(item, Batch) else 1
        self.stats.add_drop(stage, n)

    def _reject(self, rej: Reject) -> None:
        self.stats.add_reject(rej.reason)
        self._publish(REJECT_TOPIC, reject_record(rej))

    def _publish(self, topic: bytes, record: dict[str, Any]) -> None:
        # serialized here, in output.format, so the queue can count bytes: echoed `meta` may be large.
        # A record the encoder fails on (a bug an echoed value found) goes out as an internal_error
        # reject without its echoes, counted (health: degraded), not the thread that publishes it.
        try:
            fitted, cut = fit_record(topic, record, self._encode, self.config.output.max_record_bytes)
        except Exception as exc:  # noqa: BLE001 - one record must not stop the daemon
            if _worth_logging(self._count_error("encoder")):
                log.exception("the %s encoder failed on a %s record (%d so far); an internal_error reject "
                              "goes out instead", self.config.output.format, topic.decode(), self.encoder_errors)
            plain = Reject("internal_error", f"the daemon could not encode its {topic.decode()} record: "
                           f"{type(exc).__name__}", stream=record.get("stream") if isinstance(
                               record.get("stream"), str) else None)
            try:
                fitted, cut = fit_record(REJECT_TOPIC, reject_record(plain), self._encode,
                                         self.config.output.max_record_bytes)
            except Exception:  # noqa: BLE001 - nothing left to send
                return
        if cut:
            self.records_cut += 1
            if _worth_logging(self.records_cut):
                log.warning("a %s record (stream %.80r) was over output.max_record_bytes (%d); %s (%d so far)",
                            topic.decode(), record.get("stream"), self.config.output.max_record_bytes,
                            "sent with its echoed meta or detail cut" if fitted is not None else
                            "dropped: it is too large even cut", self.records_cut)
        if fitted is None:
            self.stats.add_drop("publish")
            return
        frames = fitted
        with self._shutdown_lock:
            if self._publisher_gone:
                self.stats.add_drop(UNSENT_STAGE)
                return
            self.publish_q.put(frames, len(frames[-1]))

    def _enqueue(self, outputs: list[Burst | Reject], overhead_bytes: int = 0) -> None:
        """Queue bursts (counted as their samples plus the message's other frames, which hold
        the echoed metadata); publish rejects."""
        for out in outputs:
            if isinstance(out, Reject):
                self._reject(out)
                continue
            self.stats.add_received()
            nbytes = out.iq.nbytes + overhead_bytes
            if self.ingest_q.policy == "block":
                # the input's handshake monitor is read meanwhile: this thread owns it
                watch = self._input_watch
                if not self._put_blocking(self.ingest_q, out, nbytes, watch.service if watch else None):
                    self.stats.add_drop("shutdown")      # a stop gave up on its drain
                    return
            else:
                self.ingest_q.put(out, nbytes)

    # -- stages ----------------------------------------------------------------------------
    def _watch(self, sock: zmq.Socket, role: str, endpoint: str, bind: bool) -> HandshakeWatch:
        """The handshake watch of a data socket, made in its setup (its owner thread, before it
        binds or connects)."""
        sec = self.config.security
        curve = None
        if self.security is not None and getattr(sec, f"curve_{role}"):
            curve = "client" if role == "input" and sec.input_server_key_file else "server"
        return HandshakeWatch(sock, self.handshakes[role], endpoint=endpoint, bind=bind, curve=curve)

    def _input_socket(self) -> tuple[zmq.Socket, HandshakeWatch]:
        cfg = self.config.input
        watches: list[HandshakeWatch] = []

        def setup(sock: zmq.Socket) -> None:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, cfg.rcvhwm)
            sock.setsockopt(zmq.MAXMSGSIZE, cfg.zmq_max_message_bytes)
            if self.security is not None and self.config.security.curve_input:
                self.security(sock, "input")
            if cfg.mode == "sub":
                sock.setsockopt(zmq.SUBSCRIBE, cfg.subscribe.encode())
            watches.append(self._watch(sock, "input", cfg.endpoint, cfg.bind))

        try:
            sock = open_socket(self.context, zmq.SUB if cfg.mode == "sub" else zmq.PULL, "input",
                               cfg.endpoint, cfg.bind, setup)
        except BaseException:
            for watch in watches:     # the socket is closed: its monitor's socket must be too
                watch.close()
            raise
        self.input_endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT) or cfg.endpoint
        if cfg.bind:
            watches[0].endpoint = self.input_endpoint    # its log lines name the port bound
        return sock, watches[0]

    def _ingest_loop(self) -> None:
        decoder = make_input_decoder(self.config)
        sock, watch = self._input_socket()
        self._input_watch = watch
        self._ready["ingest"].set()
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(watch.monitor, zmq.POLLIN)
        idle_s = self.config.input.idle_flush_s
        last_msg = time.monotonic()
        try:
            while not self._stop_ingest.is_set():
                ready = dict(poller.poll(int(_POLL_S * 1000)))
                now = time.monotonic()
                watch.service(now, watch.monitor in ready)     # its events, a connect again that is due
                if sock not in ready:
                    if now - last_msg >= idle_s:
                        self._enqueue(self._decoded(decoder.poll_timeout, now))
                    continue
                # take what is waiting in one go, but look at the stop flag now and then
                if self._receive_waiting(sock, decoder, 256):
                    last_msg = time.monotonic()
            if not self._abort.is_set():
                # what already reached our socket is in flight too (PULL: nobody else has it)
                self._receive_waiting(sock, decoder, self.config.input.rcvhwm)
                self._enqueue(self._decoded(decoder.flush, time.monotonic()))
        finally:
            self._decoder_stats = decoder.stats()
            self._input_watch = None
            watch.close()
            sock.close(linger=0)
            self._ingest_done.set()

    def _receive_waiting(self, sock: zmq.Socket, decoder: Decoder, limit: int) -> int:
        """Decode and enqueue up to `limit` messages already waiting; returns how many."""
        n = 0
        while n < limit and not self._abort.is_set():
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            n += 1
            self.stats.add_message()
            overhead = sum(len(f) for f in frames[:-1])
            self._enqueue(self._decoded(decoder.decode, frames, time.monotonic()), overhead)
        if n:
            self._decoder_stats = decoder.stats()
        return n

    def _decoded(self, step: Callable[..., list[Burst | Reject]], *args: Any) -> list[Burst | Reject]:
        """What a decoder step gives. Decoders reject bad input themselves; one that raises
        (a bug the input found) costs its message, rejected as internal_error and counted
        (health: degraded), not the ingest thread and every message after it."""
        try:
            return step(*args)
        except Exception as exc:  # noqa: BLE001 - one message must not stop the daemon
            if _worth_logging(self._count_error("decoder")):
                log.exception("the %s decoder failed on a message (%d so far); it is rejected",
                              self.config.input.format, self.decoder_errors)
            return [Reject("internal_error", f"the decoder failed on this message: {type(exc).__name__}: {exc}",
                           stream=self.config.input.stream or None)]

    def _batch_loop(self) -> None:
        policy = self.engine.policy
        budget = self.infer_budget
        while not self._abort.is_set():
            if not budget.has_room():
                # the bursts past the ingest queue hold queues.infer_max_bytes: take none until
                # inference gives bytes back (which wakes the budget); what the batcher holds
                # cannot grow meanwhile, so it goes now, whatever its wait
                for batch in self.batcher.flush_all():
                    self._submit(batch)
                budget.wait_for_room(_POLL_S)
                continue
            # read the flag before the queue: once ingest is done, an empty queue stays empty
            ingest_finished = self._ingest_done.is_set()
            wait = self.batcher.next_due_s(time.monotonic())
            held = wait is not None and wait <= 0 and not self._inference_free()
            # a due batch held while inference is busy waits for a burst or for inference to
            # come free (the inference thread wakes this queue when it does)
            item = self.ingest_q.get(timeout=_POLL_S if wait is None or held else min(wait, _POLL_S),
                                     until=self._inference_free if held else None, sized=True)
            if item is not None:
                burst: Burst = item[0]
                try:
                    windows = burst_to_windows(burst.iq, policy)
                except MessageError as exc:
                    self._reject(Reject(exc.reason, exc.detail, burst.burst_id, burst.stream))
                else:
                    pending = Pending(burst, windows, item[1] + windows.windows.nbytes)
                    budget.take(pending.nbytes)
                    full = self.batcher.add(pending, time.monotonic())
                    if full is not None:
                        self._submit(full)
            if ingest_finished and item is None and len(self.ingest_q) == 0:
                break
            if self._inference_free():
                for batch in self.batcher.due(time.monotonic()):
                    self._submit(batch)
        for batch in self.batcher.flush_all():
            self._submit(batch)
        self._put_blocking(self.infer_q, _END)

    def _put_blocking(self, q: BoundedQueue, item: Any, nbytes: int = 0,
                      while_waiting: Callable[[], None] | None = None) -> bool:
        """Put, waiting for room until it fits, calling while_waiting() (where given) between
        tries; False when abort came first.

        An item larger than the whole queue can never fit: put() drops and counts it once and
        the caller goes on (retrying would spin forever, counting a drop per try)."""
        if nbytes > q.max_bytes:
            q.put(item, nbytes)
            return True
        while not q.put(item, nbytes, timeout=_POLL_S):
            if self._abort.is_set():
                return False
            if while_waiting is not None:
                while_waiting()
        return True

    def _submit(self, batch: Batch) -> None:
        # its bytes are counted by infer_budget (the infer queue is bounded in batches alone)
        if not self._put_blocking(self.infer_q, batch):
            self.infer_budget.give_back(batch.nbytes)
            self.stats.add_drop("shutdown", len(batch.items))    # a stop gave up on its drain

    def _inference_free(self) -> bool:
        """Whether a due batch goes now: inference would run it at once (none running, none
        queued), or the engine's batches do not grow while it is busy (grows_held_batches)."""
        return (not self._inferring and len(self.infer_q) == 0) or not self.engine.grows_held_batches

    def _infer_loop(self) -> None:
        while not self._abort.is_set():
            self.heartbeat_s = time.monotonic()
            batch = self.infer_q.get(timeout=_POLL_S)
            if batch is _END:
                break
            if batch is None:
                continue
            self._inferring = True
            with self._shutdown_lock:
                self._running = batch
            try:
                self._run_batch(batch)
            finally:
                self._inferring = False
                self.infer_budget.give_back(batch.nbytes)   # wakes a batcher waiting for room
                self.ingest_q.wake()        # a batch the batcher holds may go now
        self._put_blocking(self.publish_q, _END)

    def _run_batch(self, batch: Batch) -> None:
        t0 = time.monotonic()
        try:
            logits, snr_db = self.engine.infer_batch(batch)
        except Exception as exc:  # noqa: BLE001 - a backend fault rejects the batch, the daemon lives
            self._count_error("inference")
            log.exception("inference failed on a batch of %d bursts", len(batch.items))
            self._reject_batch(batch, f"inference failed: {exc}")
            return
        results = self._results(batch, logits, snr_db)
        if results is None or not self._claim(batch):
            return
        t1 = time.monotonic()
        infer_s = t1 - t0  # the backend call and the refiner's work on the batch
        eng = self.engine
        for p, res in zip(batch.items, results, strict=True):
            b = p.burst
            queue_s, total_s = t0 - b.received_s, t1 - b.received_s
            rec = result_record(b, res, backend=eng.backend, precision=eng.precision,
                                model_id=eng.model_id, queue_ms=queue_s * 1e3,
                                infer_ms=infer_s * 1e3, total_ms=total_s * 1e3)
            truth = b.truth
            self.stats.add_result(res.label, queue_s, infer_s, total_s,
                                  truth.label if truth else None, truth.snr_db if truth else None,
                                  res.best_guess)
            self._publish(RESULT_TOPIC, rec)
            if self.capture is not None:
                self.capture.offer(b, rec)

    def _results(self, batch: Batch, logits: np.ndarray, snr_db: np.ndarray) -> list[Any] | None:
        """The batch's results from the network's outputs. If the refiner fails, the network's
        answers alone; if even those cannot be made, every burst is rejected (internal_error)
        and None returned."""
        try:
            return self.engine.results_for_batch(batch, logits, snr_db)
        except Exception as exc:  # noqa: BLE001 - one bad batch must not stop the daemon
            error: Exception = exc
            if self.engine.refines:
                self._count_error("refiner")
                log.exception("refiner failed on a batch of %d bursts; the network decides them alone",
                              len(batch.items))
                try:
                    return self.engine.results_for_batch(batch, logits, snr_db, refine=False)
                except Exception as exc2:  # noqa: BLE001
                    error = exc2
        self._count_error("inference")
        log.error("could not make results for a batch of %d bursts: %s", len(batch.items), error)
        self._reject_batch(batch, f"inference failed: {error}")
        return None

    def _claim(self, batch: Batch) -> bool:
        """Whether this (inference) thread records `batch`'s outcome: False when stop() gave up
        first and counted the batch as abandoned. Once claimed, stop() counts its records
        where they are, queued or (made after its count) unsent."""
        with self._shutdown_lock:
            mine = self._running is batch
            self._running = None
            return mine

    def _reject_batch(self, batch: Batch, detail: str) -> None:
        if not self._claim(batch):
            return
        for p in batch.items:
            self._reject(Reject("internal_error", detail, p.burst.burst_id, p.burst.stream))

    def _publish_loop(self) -> None:
        cfg = self.config.output
        watches: list[HandshakeWatch] = []
        try:
            sock = open_output_socket(self.context, self.config, self.security,
                                      lambda s: watches.append(self._watch(s, "output", cfg.endpoint, cfg.bind)))
        except BaseException:
            for watch in watches:
                watch.close()
            raise
        self.output_endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT) or cfg.endpoint
        if cfg.bind:
            watches[0].endpoint = self.output_endpoint
        self._ready["publisher"].set()
        publish_loop(sock, self.publish_q, self.stats, self._abort, _END, watches[0])
