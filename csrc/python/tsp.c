/* tsp.c (binding): the planar problems of attnc.datasets: exact and heuristic
 * TSP tours, and convex hulls. Each wrapper takes the arrays the Python layer
 * has checked and allocated (outputs first: tours (B, n) int64 and lengths
 * (B,) float64, or hull (B, n) int64 and sizes (B,) int64, C-contiguous;
 * points (B, n, 2) float64), builds tensor views, and runs the C operation
 * without the GIL. */
#include "buffers.h"

#include "../pointer/hull.h"
#include "../pointer/tsp.h"

/* A wrapper NAME(a, b, c) running CALL on the views t[0..2], the first N_OUT writable. */
#define TSP_WRAPPER(NAME, N_OUT, CALL, A, B, C)                                             \
    static PyObject *py_##NAME(PyObject *self, PyObject *args) {                            \
        (void)self;                                                                         \
        static const char *const names[3] = {A, B, C};                                      \
        PyObject *obj[3];                                                                   \
        if (!PyArg_UnpackTuple(args, #NAME, 3, 3, &obj[0], &obj[1], &obj[2])) return NULL; \
        buffers h = {.count = 0};                                                           \
        attnc_tensor t[3];                                                                  \
        attnc_status st = ATTNC_OK;                                                         \
        for (int i = 0; i < 3; i++)                                                         \
            if (!buffers_get(&h, obj[i], names[i], i < N_OUT, &t[i]))                       \
                return buffers_release(&h), NULL;                                           \
        ATTNC_NOGIL(st, CALL);                                                              \
        return buffers_finish(&h, st);                                                      \
    }

TSP_WRAPPER(tsp_held_karp, 2, attnc_tsp_held_karp(&t[0], &t[1], &t[2]), "tours", "lengths",
            "points")
TSP_WRAPPER(tsp_two_opt, 2, attnc_tsp_two_opt(&t[0], &t[1], &t[2]), "tours", "lengths", "points")
TSP_WRAPPER(tsp_tour_length, 1, attnc_tsp_tour_length(&t[0], &t[1], &t[2]), "lengths", "points",
            "tours")
TSP_WRAPPER(convex_hull, 2, attnc_convex_hull(&t[0], &t[1], &t[2]), "hull", "sizes", "points")

PyMethodDef attnc_tsp_methods[] = {
    {"tsp_held_karp", py_tsp_held_karp, METH_VARARGS,
     "tsp_held_karp(tours, lengths, points): optimal closed tours (n <= 12), in place."},
    {"tsp_two_opt", py_tsp_two_opt, METH_VARARGS,
     "tsp_two_opt(tours, lengths, points): nearest-neighbour + 2-opt tours, in place."},
    {"tsp_tour_length", py_tsp_tour_length, METH_VARARGS,
     "tsp_tour_length(lengths, points, tours): closed tour lengths, in place."},
    {"convex_hull", py_convex_hull, METH_VARARGS,
     "convex_hull(hull, sizes, points): hull vertices counter-clockwise from the lowest index, in place."},
    {NULL, NULL, 0, NULL}};
