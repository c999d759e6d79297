"""Runs the units of a conformance sweep in worker subprocesses, so a crash or a stall costs one
unit, not the run.

A worker gets a JSON file of units (each a list of two strings, e.g. ``[op, dtype]``) and a log
path; before each unit it writes ``{"start": unit}`` and after it one record with ``"unit": unit``.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def announce(out, unit):
    """Worker side: marks the start of a unit, so a crash inside it is charged to it."""
    out.write(json.dumps({"start": list(unit)}) + "\n")
    out.flush()


def record(out, unit, rec):
    """Worker side: the result of a unit."""
    out.write(json.dumps(dict(rec, unit=list(unit))) + "\n")
    out.flush()


def run_units(todo, worker_command, jobs=1, chunk=150, stall_limit=900):
    """Runs ``todo`` (a list of units) in chunks, ``jobs`` workers at a time.

    ``worker_command(unit_file, log)`` is the command line of one worker. Returns ``{unit: record}``;
    the unit a worker died in gets a record with one error naming the crash or stall, and the
    worker's remaining units go to a fresh worker."""
    todo = [tuple(u) for u in todo]
    queue = [todo[i:i + chunk] for i in range(0, len(todo), chunk)]
    results, lock, started_at = {}, threading.Lock(), time.time()

    def run_worker(unit_file, log):
        open(log, "w").close()
        proc = subprocess.Popen(worker_command(unit_file, log), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        last_size, last_change, stalled = 0, time.time(), False
        while proc.poll() is None:
            time.sleep(1)
            size = os.path.getsize(log)
            if size != last_size:
                last_size, last_change = size, time.time()
            elif time.time() - last_change > stall_limit:
                proc.kill()
                proc.wait()
                stalled = True
        return proc.returncode, stalled

    def read_log(log):
        started, done = None, {}
        with open(log) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut by a crash
                if "start" in rec:
                    started = tuple(rec["start"])
                else:
                    done[tuple(rec["unit"])] = rec
        return started, done

    def run_chunks(slot, tmp):
        log = os.path.join(tmp, f"worker{slot}.jsonl")
        unit_file = os.path.join(tmp, f"units{slot}.json")
        while True:
            with lock:
                if not queue:
                    return
                units = queue.pop(0)
            with open(unit_file, "w") as f:
                json.dump(units, f)
            returncode, stalled = run_worker(unit_file, log)
            started, done = read_log(log)
            if returncode != 0 and started and started not in done:
                why = (f"worker stalled over {stall_limit:.0f} s, killed" if stalled
                       else f"worker crashed (exit {returncode})")
                done[started] = {"unit": list(started), "samples": 1, "errors": 1,
                                 "failures": [{"sample": "?", "why": why}], "fallback_ops": {}}
            with lock:
                results.update(done)
                rest = [u for u in units if u not in done]
                if rest and not done and returncode == 0:
                    raise RuntimeError(f"worker reported nothing for {rest}")
                if rest:
                    queue.insert(0, rest)
                print(f"{len(results)}/{len(todo)} units done, {time.time() - started_at:.0f} s",
                      file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        threads = [threading.Thread(target=run_chunks, args=(i, tmp)) for i in range(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return results
