/* cli/main.c -- the kiln command (placeholder until the CLI lands). */
#include "kiln.h"

#include <stdio.h>

int
main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("kiln %s\n", KILN_VERSION);
    return 0;
}
