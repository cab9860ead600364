"""`python -m rlexp.sync RUN_DIR`: the command; its code is rlexp.tracking.sync."""

from rlexp.tracking.sync import main

if __name__ == "__main__":
    main()
