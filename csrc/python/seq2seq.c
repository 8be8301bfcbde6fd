/* seq2seq.c (binding): the recurrent attention decoder of attnc.models.Seq2Seq. */
#include "buffers.h"

PyMethodDef attnc_seq2seq_methods[] = {{NULL, NULL, 0, NULL}};
