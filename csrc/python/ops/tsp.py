"""The planar problems of attnc.datasets (csrc/models/pointer/tsp.h, hull.h): exact
and heuristic TSP tours, tour lengths and convex hulls. points (B, n, 2)
float64; the outputs C-contiguous, written in place."""

INCLUDES = ["../models/pointer/hull.h", "../models/pointer/tsp.h"]

OPS = [
    op(
        "tsp_held_karp",
        "attnc_tsp_held_karp",
        out("tours", ranks=2),
        out("lengths", ranks=1),
        arr("points", ranks=3),
        doc="tsp_held_karp(*, tours, lengths, points): optimal closed tours (n <= 20), in place.",
    ),
    op(
        "tsp_two_opt",
        "attnc_tsp_two_opt",
        out("tours", ranks=2),
        out("lengths", ranks=1),
        arr("points", ranks=3),
        doc="tsp_two_opt(*, tours, lengths, points): nearest-neighbour + 2-opt tours, in place.",
    ),
    op(
        "tsp_or_opt",
        "attnc_tsp_or_opt",
        out("tours", ranks=2),
        out("lengths", ranks=1),
        arr("points", ranks=3),
        doc="tsp_or_opt(*, tours, lengths, points): nearest-neighbour + 2-opt + Or-opt tours, in place.",
    ),
    op(
        "tsp_tour_length",
        "attnc_tsp_tour_length",
        out("lengths", ranks=1),
        arr("points", ranks=3),
        arr("tours", ranks=2),
        doc="tsp_tour_length(*, lengths, points, tours): closed tour lengths, in place.",
    ),
    op(
        "convex_hull",
        "attnc_convex_hull",
        out("hull", ranks=2),
        out("sizes", ranks=1),
        arr("points", ranks=3),
        doc="convex_hull(*, hull, sizes, points): hull vertices counter-clockwise from the lowest index, in place.",
    ),
]
