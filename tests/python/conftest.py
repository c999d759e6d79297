import os
import sys

# Tests run against the in-tree package (python/torchtpu with the built _C extension).
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
