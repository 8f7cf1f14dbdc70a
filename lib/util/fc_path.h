/*
 * fc_path.h - one step of an entry's nesting path (a mapping key or a list
 * index), as sources list it and DCP planner_data stores it.
 *
 * It lives in util/ because both format/ (fc_dcp.h, planner_data) and
 * source/ (fc_source.h, every entry) use it, and a format may not include a
 * source header.
 */
#ifndef FC_PATH_H
#define FC_PATH_H

#include <stdint.h>

struct fc_path_elem {
    int is_index; /* 1: list index (index), 0: mapping key (key) */
    int64_t index;
    const char *key;
};

#endif
