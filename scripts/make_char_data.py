#!/usr/bin/python3
"""Turns a text file into the character-level language-model dataset that
configs/char_gru.yaml trains on: a safetensors file with two int64 tensors of shape
[windows, seq], `tokens` (the bytes of a window of the text) and `next` (the bytes one
position later: the target of every position).

    scripts/make_char_data.py [TEXT] OUT.safetensors [--seq 64] [--stride 64] [--vocab 128]

TEXT defaults to /usr/share/common-licenses/GPL-3 (Debian's base-files). Windows start
every `stride` bytes; with stride = seq (the default) they do not overlap, so a
validation split of windows holds out text the training windows do not contain. Every
byte must be below `vocab` (the model's num_embeddings; 128 = ASCII). Needs only the
Python standard library. Exit code 2 with a message on bad input.
"""
import argparse
import os
import sys

from safetensors_writer import write_safetensors  # scripts/, beside this file

DEFAULT_TEXT = "/usr/share/common-licenses/GPL-3"


class DataError(Exception):
    pass


def windows(data, seq, stride):
    """(tokens, next) as flat lists, windows of seq bytes and their one-later targets."""
    if len(data) < seq + 1:
        raise DataError("the text has %d bytes; a window needs seq + 1 = %d" % (len(data), seq + 1))
    tokens, nxt = [], []
    for start in range(0, len(data) - seq, stride):
        tokens.extend(data[start:start + seq])
        nxt.extend(data[start + 1:start + seq + 1])
    return tokens, nxt


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", metavar="[TEXT] OUT", help="the text (optional) and the output file")
    ap.add_argument("--seq", type=int, default=64, help="window length (the model's seq dimension)")
    ap.add_argument("--stride", type=int, default=None, help="bytes between window starts (default: seq)")
    ap.add_argument("--vocab", type=int, default=128, help="bytes must be below this (num_embeddings)")
    args = ap.parse_args(argv)
    if len(args.paths) > 2:
        ap.error("give at most TEXT and OUT")
    text, out = (DEFAULT_TEXT, args.paths[0]) if len(args.paths) == 1 else args.paths
    stride = args.stride or args.seq
    try:
        if args.seq < 1 or stride < 1 or not 1 <= args.vocab <= 256:
            raise DataError("--seq and --stride must be positive and --vocab in [1, 256]")
        try:
            with open(text, "rb") as f:
                data = f.read()
        except OSError as e:
            raise DataError("cannot read %s: %s" % (text, e.strerror))
        bad = next((i for i, b in enumerate(data) if b >= args.vocab), None)
        if bad is not None:
            raise DataError("%s: byte %d at offset %d is not below --vocab %d" % (text, data[bad], bad, args.vocab))
        tokens, nxt = windows(data, args.seq, stride)
        n = len(tokens) // args.seq
        write_safetensors(out, {"tokens": ([n, args.seq], tokens), "next": ([n, args.seq], nxt)},
                          {"source": os.path.abspath(text), "seq": str(args.seq), "stride": str(stride),
                           "vocab": str(args.vocab)})
    except (DataError, OSError) as e:
        print("make_char_data: %s" % e, file=sys.stderr)
        return 2
    print("wrote %s: %d windows of %d bytes from %s (%d bytes)" % (out, n, args.seq, text, len(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
