import os
import tempfile

# Tests compile into a cache of their own, one per pytest-xdist worker: counts of compiles and hits
# are then this process's, and a user's ~/.cache/torchtpu is left alone. Set before torchtpu reads
# it (at its first compile). Workers inherit the controller's directory and take a folder in it.
os.environ.setdefault("TORCHTPU_CACHE_DIR", tempfile.mkdtemp(prefix="torchtpu-test-cache-"))
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ["TORCHTPU_CACHE_DIR"] = os.path.join(os.environ["TORCHTPU_CACHE_DIR"],
                                                    os.environ["PYTEST_XDIST_WORKER"])
    os.makedirs(os.environ["TORCHTPU_CACHE_DIR"], exist_ok=True)
