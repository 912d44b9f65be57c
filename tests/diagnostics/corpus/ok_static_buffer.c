// expect: none
// One buffer allocated on first use and kept for the program's life (still reachable).
#include <stdlib.h>
static int *scratch = 0;
int f(int x) {
    if (!scratch) scratch = malloc(sizeof(int) * 64);
    scratch[0] = x;
    return scratch[0] + 1;
}
