"""Running one piece of work on several Python threads at once (the tests
of many threads calling one model)."""

import threading


def failures_on_threads(work, count):
    """Runs `work()` on `count` threads at once and returns what failed: the
    `repr` of each exception a thread raised, in no particular order."""
    failures = []

    def run():
        try:
            work()
        except Exception as e:  # reported to the caller
            failures.append(repr(e))

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures
