// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * One datapath generation: every program that reads one set of maps (the ipcache, the
 * endpoints and their policy), compiled as one object, so that loading it makes one
 * set of maps that all its programs share.
 */
#include "to_netdev.c"
#include "endpoint.c"

char LICENSE[] SEC("license") = "Dual BSD/GPL";
