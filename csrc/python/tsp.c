/* tsp.c (binding): exact and heuristic planar TSP tours (attnc.datasets). */
#include "buffers.h"

PyMethodDef attnc_tsp_methods[] = {{NULL, NULL, 0, NULL}};
