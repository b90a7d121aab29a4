"""Command line: ``skdp demo``."""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="skdp", description="Differentially private estimators.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train DPMomentumClassifier on load_digits at several epsilons")
    demo.add_argument("--out", default="skdp-demo", help="folder for the plot (default: skdp-demo)")
    demo.add_argument("--epsilons", type=float, nargs="+", default=None)
    demo.add_argument("--seeds", type=int, default=3, help="repetitions per epsilon")
    demo.add_argument("--verbose", type=int, default=0, help="1: skorch's log per epoch, with epsilon")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import DEFAULT_EPSILONS, run_demo

        run_demo(args.out, epsilons=tuple(args.epsilons or DEFAULT_EPSILONS),
                 seeds=tuple(range(args.seeds)), verbose=args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
