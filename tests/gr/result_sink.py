#!/usr/bin/python3
"""A GNU Radio 3.10 flowgraph consuming rfclassify's results (run with /usr/bin/python3):
zeromq.sub_msg_source -> blocks.message_debug, for the daemon's output.format = "gr-pmt".

Prints `READY` once running; after --count messages or --seconds, prints `RESULTS <json>`:
every message as GNU Radio's pmt.to_python reads it, and exits.
"""

import argparse
import json
import sys
import time

import pmt
from gnuradio import blocks, gr, zeromq


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    tb = gr.top_block()
    source = zeromq.sub_msg_source(args.endpoint, 100, False)
    store = blocks.message_debug()
    tb.msg_connect(source, "out", store, "store")
    tb.start()
    print("READY", flush=True)
    deadline = time.monotonic() + args.seconds
    while store.num_messages() < args.count and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)   # anything past the count should arrive too
    tb.stop()
    tb.wait()
    messages = [pmt.to_python(store.get_message(i)) for i in range(store.num_messages())]
    print("RESULTS", json.dumps(messages, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
