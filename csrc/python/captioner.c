/* captioner.c (binding): the show-attend-tell decoder of attnc.models.Captioner. */
#include "buffers.h"

PyMethodDef attnc_captioner_methods[] = {{NULL, NULL, 0, NULL}};
