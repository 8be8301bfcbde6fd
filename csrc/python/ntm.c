/* ntm.c (binding): the Neural Turing Machine's addressing and memory operations. */
#include "buffers.h"

PyMethodDef attnc_ntm_methods[] = {{NULL, NULL, 0, NULL}};
