"""An ``--exec`` handler script for the daemon tests (a stand-in for an LLM CLI).

Reads the event JSON on stdin. Behaviour by message text:
- ``block``: the first time only (a marker file claimed with rename), report
  ``started <seq> <pid>`` to the probe and hang until killed;
- ``slow``: report ``started <seq>``, take 1.5 s, then go on as below;
- ``hang``: sleep a minute (for a ``--timeout`` to stop);
- ``wait``: report ``started <seq>``, block until the test writes to the FIFO
  $TEST_RELEASE, then go on as below;
- ``fail``: exit 3 with an error on stderr, every time;
- anything else: append ``<seq> <event_id> <text>`` to $TEST_OUT, report
  ``done <seq>``, print ``re: <text>`` (the reply) for new tasks.
"""

import json
import os
import socket
import sys
import time


def probe(line: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(os.environ["TEST_PROBE"])
        s.sendall((line + "\n").encode())


def main() -> int:
    event = json.load(sys.stdin)
    message = event.get("payload", {}).get("message") or {}
    text = " ".join(p.get("text", "") for p in message.get("parts", []) if p.get("kind") == "text")
    seq = event["seq"]
    if text == "block":
        marker = os.environ["TEST_BLOCK_MARKER"]
        try:
            os.rename(marker, marker + ".claimed")
        except FileNotFoundError:
            pass
        else:
            probe(f"started {seq} {os.getpid()}")
            time.sleep(120)
            return 9
    if text == "wait":
        probe(f"started {seq}")
        with open(os.environ["TEST_RELEASE"]) as fifo:
            fifo.read()
    if text == "hang":
        time.sleep(60)
    if text == "slow":
        probe(f"started {seq}")
        time.sleep(1.5)
    if text == "fail":
        print(f"cannot handle seq {seq}: no such skill", file=sys.stderr)
        return 3
    with open(os.environ["TEST_OUT"], "a") as f:
        f.write(f"{seq} {event['event_id']} {text}\n")
    probe(f"done {seq}")
    if event["type"] == "task.created":
        print(f"re: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
