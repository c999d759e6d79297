"""``python -m torchtpu.testing.models``: the model-zoo sweep's command line, at the module path
that the docs, the recorded commands and the sweep's own worker subprocesses name. The zoo is
:mod:`torchtpu.testing.zoo`."""

import sys

from .zoo.sweep import main

if __name__ == "__main__":
    sys.exit(main())
