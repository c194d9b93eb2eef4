"""Byte streams both ends of a test peer can make from a seed, and where a
received one first differs (imported by the *_peer.py scripts beside it)."""
import random


def stream(seed, n):
    return random.Random(seed).randbytes(n)


def first_difference(got, want):
    n = min(len(got), len(want))
    for i in range(n):
        if got[i] != want[i]:
            return i
    return n
