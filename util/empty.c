/* util/empty.c -- an empty translation unit for modules that have no sources yet. */
typedef int kiln_empty_unit;
