/* pointer.c (binding): the pointer network's decoding (attnc.models.PointerNet). */
#include "buffers.h"

PyMethodDef attnc_pointer_methods[] = {{NULL, NULL, 0, NULL}};
