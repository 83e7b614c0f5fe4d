#!/usr/bin/python3
"""Writes the synthetic click dataset that configs/dlrm.yaml trains on: a safetensors file
with, per sample,

- `dense`: [samples, 13] float32, N(0, 1) features (Criteo's 13 counters, standardised);
- `cat_0` .. `cat_7`: [samples, 1] int64, one id per categorical feature in [0, rows),
  drawn with a Zipf skew (id rank r has probability proportional to 1 / (r + 1)^zipf),
  the ranks scattered over the table by a seeded bijection so that popular ids are not
  the small ones;
- `click`: [samples, 1] float32, 0 or 1.

    scripts/make_click_data.py OUT.safetensors [--samples 200000] [--rows 1000000]
                               [--tables 8] [--zipf 1.3] [--seed 0]

The clicks have a learnable signal. A hidden logit adds a linear function of the dense
features, a bias per categorical id, and, for four pairs of features (0-1, 2-3, 4-5,
6-7), the dot product of the two ids' hidden 4-d vectors: what DLRM's bottom MLP, its
tables and its pairwise dot interaction can each capture. Each sample clicks with
probability sigmoid(logit). Ranking by the hidden logit itself gives the best AUC any
model can reach on the data; the script prints it (0.76 at the defaults), and the best
from the dense features alone (0.63): an AUC above that shows the tables learned. A model
learns an id's bias and vector only from the samples that hold it, and with the Zipf
skew many ids are rare (at 1.3, 14,000 distinct ids per table in 200,000 samples, 10,200
of them seen once): their part of the signal stays out of reach, and a model that trains
long enough memorises them (the validation loss turns up).

Deterministic in --seed; needs only the Python standard library. Exit code 2 with a
message on bad settings.
"""
import argparse
import array
import itertools
import math
import random
import sys

from safetensors_writer import write_safetensors  # scripts/, beside this file

DENSE = 13
LATENT = 4
PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7))
# the hidden logit's parts: standard deviations and the base rate
DENSE_STD = 0.7
BIAS_STD = 0.25
VECTOR_STD = 0.42  # per component: a pair's dot product has std VECTOR_STD^2 * sqrt(LATENT)
BASE_LOGIT = -1.0  # about 30% clicks


class DataError(Exception):
    pass


class HiddenTable:
    """Each id's hidden bias and vector, drawn from the seed the first time the id is used."""

    def __init__(self, rng):
        self.rng = rng
        self.rows = {}

    def __getitem__(self, row):
        entry = self.rows.get(row)
        if entry is None:
            g = self.rng.gauss
            entry = (g(0, BIAS_STD), [g(0, VECTOR_STD) for _ in range(LATENT)])
            self.rows[row] = entry
        return entry


def scatter(rows, rng):
    """A bijection rank -> row of [0, rows): rank * a + b mod rows, a coprime with rows."""
    while True:
        a = rng.randrange(1, rows) if rows > 1 else 1
        if math.gcd(a, rows) == 1:
            return a, rng.randrange(rows)


def auc(scores, labels):
    """ROC AUC with ties given their average rank (runtime/roc_auc.h's definition)."""
    order = sorted(range(len(scores)), key=scores.__getitem__)
    positives = sum(labels)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    rank_sum, i = 0.0, 0
    while i < len(order):
        j = i
        while j < len(order) and scores[order[j]] == scores[order[i]]:
            j += 1
        rank_sum += sum(labels[order[k]] for k in range(i, j)) * (i + 1 + j) / 2
        i = j
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def clicks(samples, rows, tables, zipf, seed):
    """(dense, ids per table, clicks, hidden logits, the hidden logits' dense part), flat lists."""
    rng = random.Random(seed)
    # a random direction of norm DENSE_STD: the dense part's share of the signal is the same
    # for every seed (the features are N(0, 1), so its standard deviation is the norm)
    weights = [rng.gauss(0, 1) for _ in range(DENSE)]
    norm = math.sqrt(sum(w * w for w in weights))
    weights = [DENSE_STD * w / norm for w in weights]
    hidden = [HiddenTable(random.Random("%d:table:%d" % (seed, t))) for t in range(tables)]
    maps = [scatter(rows, rng) for _ in range(tables)]
    cdf = list(itertools.accumulate(1.0 / (r + 1) ** zipf for r in range(rows)))
    ranks = [rng.choices(range(rows), cum_weights=cdf, k=samples) for _ in range(tables)]
    ids = [[(r * a + b) % rows for r in rank] for rank, (a, b) in zip(ranks, maps)]
    dense, label, logits, dense_logits = [], [], [], []
    for i in range(samples):
        x = [rng.gauss(0, 1) for _ in range(DENSE)]
        dense.extend(x)
        logit = BASE_LOGIT + sum(w * v for w, v in zip(weights, x))
        dense_logits.append(logit)
        entries = [hidden[t][ids[t][i]] for t in range(tables)]
        logit += sum(bias for bias, _ in entries)
        for t, u in PAIRS:
            if u < tables:
                logit += sum(p * q for p, q in zip(entries[t][1], entries[u][1]))
        logits.append(logit)
        label.append(1.0 if rng.random() < 1 / (1 + math.exp(-logit)) else 0.0)
    return dense, ids, label, logits, dense_logits


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", metavar="OUT", help="the output file")
    ap.add_argument("--samples", type=int, default=200000, help="samples to write")
    ap.add_argument("--rows", type=int, default=1000000, help="ids are below this (the tables' num_embeddings)")
    ap.add_argument("--tables", type=int, default=8, help="categorical features (cat_0 ..)")
    ap.add_argument("--zipf", type=float, default=1.3, help="skew of the ids: rank r has weight 1/(r+1)^zipf")
    ap.add_argument("--seed", type=int, default=0, help="the generator's seed")
    args = ap.parse_args(argv)
    try:
        if args.samples < 1:
            raise DataError("--samples must be positive")
        if args.rows < 1:
            raise DataError("--rows must be positive")
        if args.tables < 1:
            raise DataError("--tables must be positive")
        if not (args.zipf >= 0 and math.isfinite(args.zipf)):
            raise DataError("--zipf must be a finite number >= 0 (0: uniform ids)")
        dense, ids, label, logits, dense_logits = clicks(args.samples, args.rows, args.tables, args.zipf, args.seed)
        best, best_dense = auc(logits, label), auc(dense_logits, label)
        tensors = {"dense": ([args.samples, DENSE], dense, "F32")}
        for t in range(args.tables):
            tensors["cat_%d" % t] = ([args.samples, 1], ids[t])
        tensors["click"] = ([args.samples, 1], label, "F32")
        write_safetensors(args.out, tensors,
                          {"rows": str(args.rows), "tables": str(args.tables), "zipf": str(args.zipf),
                           "seed": str(args.seed), "best_auc": "%.4f" % best, "best_dense_auc": "%.4f" % best_dense})
    except (DataError, OSError) as e:
        print("make_click_data: %s" % e, file=sys.stderr)
        return 2
    distinct = sum(len(set(column)) for column in ids) / args.tables
    print("wrote %s: %d samples, %.1f%% clicks, %d tables of %d rows (%.0f distinct ids per table); "
          "best achievable AUC %.4f (from the dense features alone %.4f)"
          % (args.out, args.samples, 100 * sum(label) / args.samples, args.tables, args.rows, distinct, best,
             best_dense))
    return 0


if __name__ == "__main__":
    sys.exit(main())
