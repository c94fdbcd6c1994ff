"""What ages into a broker's oldest GC generation: a probe loaded through PYTHONPATH.

    GC_PROBE_DIR=/tmp/probe PYTHONPATH=bench/gc_probe:src .venv/bin/python bench/latency.py ...

Every process whose command line names oncelog (the brokers; not the benchmark's own
processes) starts a thread that, every ``GC_PROBE_EVERY_S`` (10) s, counts the objects of
generation 2 by type (functions and methods by qualified name, coroutines and frames by code
name) and appends the growth since the last count, the generation's size, the frozen count,
`gc.get_count()` and the number of full collections to ``$GC_PROBE_DIR/gc-PID.txt``.

Full collections that free next to nothing (the loop monitor's GC events carry the number
collected) are triggered by old-generation growth rather than by cyclic garbage, and this
shows what grows. It found the purgatory's completed acks=all Produces, held for their 30 s
deadline with their timers (RESULTS.md section 11.2). A diagnostic: each count walks the
generation with the GIL held (a few ms); never for figures.
"""

import os
import sys

_ARGV = " ".join(sys.argv)
if os.environ.get("GC_PROBE_DIR") and "oncelog" in _ARGV and "bench/" not in _ARGV:
    import collections
    import gc
    import threading
    import time

    def _name(o: object) -> str:
        t = type(o).__name__
        if t in ("function", "method"):
            return f"{t}:{getattr(o, '__qualname__', '?')}"
        if t in ("coroutine", "frame"):
            code = getattr(o, "cr_code", None) or getattr(o, "f_code", None)
            return f"{t}:{code.co_qualname if code else '?'}"
        return t

    def _probe() -> None:
        out = os.path.join(os.environ["GC_PROBE_DIR"], f"gc-{os.getpid()}.txt")
        every = float(os.environ.get("GC_PROBE_EVERY_S", "10"))
        full: list[tuple[float, int]] = []

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "stop" and info["generation"] == 2:
                full.append((time.monotonic(), info["collected"]))

        gc.callbacks.append(on_gc)
        before: collections.Counter[str] = collections.Counter()
        while True:
            time.sleep(every)
            objects = gc.get_objects(2)
            now = collections.Counter(_name(o) for o in objects)
            size = len(objects)
            del objects
            with open(out, "a") as f:
                f.write(
                    f"t={time.monotonic():.1f} gen2={size} frozen={gc.get_freeze_count()} "
                    f"count={gc.get_count()} full={len(full)} (collected {[c for _, c in full]})\n"
                )
                for name, grew in (now - before).most_common(25):
                    f.write(f"   +{grew} {name} (now {now[name]})\n")
            before = now

    threading.Thread(target=_probe, name="gc-probe", daemon=True).start()
