"""`python -m rlexp.export RUN`: the command; its code is rlexp.engine.export."""

import sys

from rlexp.engine.export import main

if __name__ == "__main__":
    main(sys.argv[1:])
