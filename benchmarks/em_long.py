"""One long EM run, resumable: a case of :mod:`benchmarks.em` in memory, checkpointed after every pass.

Run: ``python -m benchmarks.em_long --case alarm2 --rows 1e6 --variant plain --folder /tmp/em_long``
(the same command again continues from the newest checkpoint).

For fits that need more passes than one sitting allows (alarm2's plain EM at 10⁶ rows
creeps along a ridge for thousands of passes): the store of :mod:`benchmarks.em` is
loaded into memory, the start is the one of :mod:`benchmarks.em_accel`
(``randomized(default_rng(0))``), ``dpgm.fit(..., tol=TOL, checkpoint=...)`` runs in
this process without a cluster, and every evaluated point is appended to
``<folder>/<case>_<rows>_<variant>.tsv`` (iteration, log-likelihood, step, accepted,
unix time). After a resume, iterations go on counting from the checkpoint, and for
plain EM the iteration is the pass. Plain EM resumes exactly (its state is its
parameters); SQUAREM resumes from its last accepted point with a fresh step-length
bound, so its passes across a resume are not those of one uninterrupted run.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.em import _cases, _store  # noqa: E402
from benchmarks.em_accel import VARIANTS  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="alarm2", choices=["alarm2", "lcm20"])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--variant", default="plain", choices=list(VARIANTS))
    parser.add_argument("--tol", type=float, default=1e-12)
    parser.add_argument("--max-iter", type=int, default=100_000)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/em_long"))
    args = parser.parse_args(argv)
    case = _cases()[args.case]
    name = f"{args.case}_{int(args.rows)}_{args.variant}"
    checkpoint = args.folder / name
    checkpoint.mkdir(parents=True, exist_ok=True)
    with dpgm.connect(n_workers=1) as client:  # only to sample the store once, if it is missing
        path = _store(args.case, case, int(args.rows), client)
    data = dpgm.open_dataset(path).drop_vars(case["latent"]).load()
    start = case["model"].randomized(np.random.default_rng(0))
    resume = checkpoint if (checkpoint / "LATEST").exists() else None
    with (args.folder / f"{name}.tsv").open("a") as trace:

        def record(h: dict) -> None:
            trace.write(f"{h['iteration']}\t{h['loglik']!r}\t{h['step']}\t{h['accepted']}\t{time.time():.0f}\n")
            trace.flush()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
            result = dpgm.fit(start, data, method="em", init="model", tol=args.tol, max_iter=args.max_iter,
                              callback=record, checkpoint=checkpoint, resume=resume, **VARIANTS[args.variant])
    print(f"{name}: converged {result.converged}, iteration {result.n_iter} ({result.passes} passes in this run), "
          f"loglik {result.loglik!r}")


if __name__ == "__main__":
    main()
