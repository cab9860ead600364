"""`python -m rlexp.ui`: the command; its code is rlexp.tracking.ui."""

import sys

from rlexp.tracking.ui import main

if __name__ == "__main__":
    sys.exit(main())
