import os
import tempfile

# Tests compile into a cache of their own: counts of compiles and hits are then this run's, and a
# user's ~/.cache/torchtpu is left alone. Set before torchtpu reads it (at its first compile).
os.environ.setdefault("TORCHTPU_CACHE_DIR", tempfile.mkdtemp(prefix="torchtpu-test-cache-"))
