#!/usr/bin/python3
"""A GNU Radio 3.10 flowgraph acting as the SDR for rfclassify's ingest tests (run with /usr/bin/python3).

    stream: modulator (QPSK/BPSK constellation + RRC, GMSK, or FM) -> vector_sink; gated into
      bursts separated by silence, then vector_source_c (packet_len and burst_id tags at each
      burst) -> channels.channel_model (noise) [-> add_const_cc: a receiver DC offset, --dc]
      [-> analog.pwr_squelch_cc (squelch_sob / squelch_eob tags), --marker squelch]
      [-> blocks.burst_tagger fed the gate (burst #t / #f tags), --marker burst_tagger]
      [-> blocks.stream_to_vector, --vlen N] -> zeromq.pub_sink (optionally pass_tags, key),
      or zeromq.push_sink with --sink push, or blocks.file_sink (a raw cf32 recording, --dump)
      with --sink file; the stream ends 2 x gap after its last burst, or N samples before that
      burst's end (--end-inside-last N: a flowgraph stopped while a burst is on the air)
    pdu-squelch: the stream's bursts and noise -> analog.pwr_squelch_cc -> pdu.tags_to_pdu_c
      (a PDU from each squelch_sob to its squelch_eob) -> zeromq.pub_msg_sink
    pdu: modulator -> channels.channel_model -> vector_sink; then vector_source_c with
      packet_len / burst_id / label tags -> pdu.tagged_stream_to_pdu -> zeromq.pub_msg_sink,
      the same samples written to --dump (raw complex64) for comparison

Protocol with the test: prints `ENDPOINT <endpoint>` once bound, waits for a line on stdin
(the test subscribes meanwhile), runs the flowgraph, prints `TRUTH <json>` with every
burst's stream offset and length, and exits.
"""

import argparse
import json
import sys
import time

import numpy as np
import pmt
from gnuradio import analog, blocks, channels, digital, gr, pdu, zeromq

SPS = 4


def modulator(name: str, sample_rate_hz: float):
    """A (source, last block) pair producing an endless modulated complex stream."""
    if name == "fm":
        tone = analog.sig_source_f(sample_rate_hz, analog.GR_SIN_WAVE, 3e3, 1.0, 0.0)
        fm = analog.frequency_modulator_fc(2 * np.pi * 25e3 / sample_rate_hz)
        return [tone, fm]
    bits = blocks.vector_source_b(list(np.random.default_rng(1).integers(0, 256, 4096)), True)
    if name == "gmsk":
        return [bits, digital.gmsk_mod(samples_per_symbol=SPS, bt=0.35)]
    const = digital.constellation_qpsk() if name == "qpsk" else digital.constellation_bpsk()
    mod = digital.generic_mod(const, differential=False, samples_per_symbol=SPS,
                              pre_diff_code=True, excess_bw=0.35)
    # measured output power of generic_mod here: QPSK (points +-1+-1j) 4.0, BPSK 1.0
    scale = blocks.multiply_const_cc(0.5 if name == "qpsk" else 1.0)
    return [bits, mod, scale]


def modulate(name: str, sample_rate_hz: float, n: int, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """n samples of the modulator (through channels.channel_model when noise > 0), by a first flowgraph.

    The bursty flowgraph then has a single chain: two finite sources into one multiply block
    race at the end (GNU Radio may finish the block before the slower input delivers)."""
    tb = gr.top_block()
    chain = modulator(name, sample_rate_hz)
    if noise > 0:
        chain.append(channels.channel_model(noise_voltage=noise, frequency_offset=0.0, epsilon=1.0,
                                            taps=[1.0 + 0j], noise_seed=seed + 1))
    head = blocks.head(gr.sizeof_gr_complex, n)
    sink = blocks.vector_sink_c()
    tb.connect(*chain, head, sink)
    tb.run()
    return np.asarray(sink.data(), dtype=np.complex64)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sink", choices=("stream", "push", "pdu", "pdu-squelch", "file"), default="stream")
    ap.add_argument("--mod", choices=("qpsk", "bpsk", "gmsk", "fm"), default="qpsk")
    ap.add_argument("--pass-tags", action="store_true")
    ap.add_argument("--key", default="")
    ap.add_argument("--bursts", type=int, default=8)
    ap.add_argument("--min-len", type=int, default=800)
    ap.add_argument("--max-len", type=int, default=4000)
    ap.add_argument("--gap", type=int, default=3000, help="shortest gap between bursts (samples)")
    ap.add_argument("--noise", type=float, default=0.01, help="noise voltage (bursts have unit power)")
    ap.add_argument("--dc", type=float, default=0.0, help="stream: receiver DC offset (LO leakage) added after the channel")
    ap.add_argument("--vlen", type=int, default=1, help="stream: publish vectors of this many samples "
                    "(blocks.stream_to_vector before the sink)")
    ap.add_argument("--marker", choices=("", "squelch", "burst_tagger"), default="",
                    help="stream: a GNU Radio block that marks each burst's start and end with tags")
    ap.add_argument("--end-inside-last", type=int, default=-1,
                    help="stream: stop this many samples before the last burst ends, without the silence after "
                         "it (a flowgraph stopped while a burst is on the air); -1: 2 x gap of silence")
    ap.add_argument("--sample-rate", type=float, default=1e6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dump", default="", help="pdu: write the PDU samples here (raw complex64); file: the recording")
    ap.add_argument("--no-wait", action="store_true", help="start at once, without waiting for stdin")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    lengths = [int(n) for n in rng.integers(args.min_len, args.max_len + 1, args.bursts)]
    gaps = [int(g) for g in rng.integers(args.gap, 2 * args.gap, args.bursts)]

    def tag(offset, key, value):
        return gr.tag_utils.python_to_tag((offset, pmt.intern(key), value, pmt.intern("burst_source")))

    truth, tags, pos = [], [], 0
    if args.sink in ("stream", "push", "pdu-squelch", "file"):
        gate = []
        for i, (n, g) in enumerate(zip(lengths, gaps)):
            gate += [0.0] * g
            pos += g
            tags += [tag(pos, "packet_len", pmt.from_long(n)), tag(pos, "burst_id", pmt.from_long(i))]
            truth.append({"offset": pos, "length": n, "burst_id": i})
            gate += [1.0] * n
            pos += n
        if args.end_inside_last < 0:
            gate += [0.0] * (2 * args.gap)
        else:
            del gate[len(gate) - args.end_inside_last:]
        # bursts separated by silence, then the channel adds noise everywhere
        samples = modulate(args.mod, args.sample_rate, len(gate)) * np.asarray(gate, np.float32)
        src = blocks.vector_source_c(samples.tolist(), False, 1, tags)
        channel = channels.channel_model(noise_voltage=args.noise, frequency_offset=0.0, epsilon=1.0,
                                         taps=[1.0 + 0j], noise_seed=args.seed + 1)
        if args.sink == "push":  # lossless hand-off to a PULL socket (push_sink has no key)
            sink = zeromq.push_sink(gr.sizeof_gr_complex, 1, "tcp://127.0.0.1:0", 100, args.pass_tags, -1)
        elif args.sink == "pdu-squelch":
            sink = zeromq.pub_msg_sink("tcp://127.0.0.1:0", 100, True)
        elif args.sink == "file":
            sink = blocks.file_sink(gr.sizeof_gr_complex, args.dump, False)
            sink.set_unbuffered(False)
        else:
            sink = zeromq.pub_sink(gr.sizeof_gr_complex, args.vlen, "tcp://127.0.0.1:0", 100, args.pass_tags, -1,
                                   args.key)
        tb = gr.top_block()
        chain = [src, channel]
        if args.dc:  # the receiver's own DC offset, in every sample of the stream
            chain.append(blocks.add_const_cc(complex(args.dc, -0.5 * args.dc)))
        if args.marker == "squelch":  # opens 10 dB below the unit-power bursts, gate off: every sample passes
            chain.append(analog.pwr_squelch_cc(-10.0, 0.1, 0, False))
        elif args.marker == "burst_tagger":  # #t at each burst's first sample, #f after its last
            tagger = blocks.burst_tagger(gr.sizeof_gr_complex)
            tb.connect(blocks.vector_source_s([int(g) for g in gate], False), (tagger, 1))
            chain.append(tagger)
        if args.sink == "pdu-squelch":  # the squelch's start and end tags make the PDUs
            to_pdu = pdu.tags_to_pdu_c(pmt.intern("squelch_sob"), pmt.intern("squelch_eob"), 1 << 20,
                                       args.sample_rate, [], False, 0, 0.0)
            tb.connect(*chain, analog.pwr_squelch_cc(-10.0, 0.1, 0, False), to_pdu)
            tb.msg_connect(to_pdu, "pdus", sink, "in")
        elif args.vlen > 1:
            tb.connect(*chain, blocks.stream_to_vector(gr.sizeof_gr_complex, args.vlen), sink)
        else:
            tb.connect(*chain, sink)
    else:
        for i, n in enumerate(lengths):
            tags += [tag(pos, "packet_len", pmt.from_long(n)), tag(pos, "burst_id", pmt.from_long(i)),
                     tag(pos, "label", pmt.intern(args.mod.upper()))]
            truth.append({"offset": pos, "length": n, "burst_id": i})
            pos += n
        samples = modulate(args.mod, args.sample_rate, pos, noise=args.noise, seed=args.seed)
        if args.dump:
            samples.tofile(args.dump)
        src = blocks.vector_source_c(samples.tolist(), False, 1, tags)
        to_pdu = pdu.tagged_stream_to_pdu(gr.types.complex_t, "packet_len")
        sink = zeromq.pub_msg_sink("tcp://127.0.0.1:0", 100, True)
        tb = gr.top_block()
        tb.connect(src, to_pdu)
        tb.msg_connect(to_pdu, "pdus", sink, "in")

    print("ENDPOINT", "file:" + args.dump if args.sink == "file" else sink.last_endpoint(), flush=True)
    if not args.no_wait:
        sys.stdin.readline()
    tb.start()
    tb.wait()
    time.sleep(0.5)  # let the message sink hand its last PDUs to ZeroMQ
    tb.stop()
    tb.wait()
    print("TRUTH", json.dumps(truth), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
