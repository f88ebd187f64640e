"""dpgm in one script: a table to Zarr, a sample of a shipped network, counts and a fit on a local cluster.

Run it as ``python examples/quickstart.py`` (it writes two small stores in the current folder).
"""

import pandas as pd

import dpgm


def main() -> None:
    # 1. your own table: labels become codes, missing values -1; a Zarr store; a lazy dataset
    df = pd.DataFrame({"smoker": ["yes", "no", None, "no"], "cancer": ["no", "no", "yes", "no"]})
    dpgm.write_dataset(dpgm.from_pandas(df), "survey.zarr", mode="w")
    print(dpgm.Schema.from_dataset(dpgm.open_dataset("survey.zarr")))

    # 2. every pass runs on a cluster: here a local one, one worker process per core
    with dpgm.connect() as client:
        asia = dpgm.load_network("asia")
        ds = dpgm.sample_bayesian_network(asia, 100_000, "asia.zarr", seed=1, chunk_rows=20_000,
                                          mode="w", client=client)
        tables = dpgm.counts(ds, [("smoke", "lung")], client=client)
        print(tables[("smoke", "lung")].to_pandas())

        # 3. the network's structure fitted to the data: one pass over the data
        result = dpgm.fit(dpgm.BayesianNetwork.from_edges(asia.edges), ds, client=client)
        print(result.summary())


if __name__ == "__main__":  # worker processes import this file again: start the cluster only here
    main()
