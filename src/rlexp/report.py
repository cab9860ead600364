"""`python -m rlexp.report SWEEP`: the command; its code is rlexp.tracking.report."""

from rlexp.tracking.report import main

if __name__ == "__main__":
    main()
