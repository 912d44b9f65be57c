// expect: none
// malloc and free in the same call.
#include <stdlib.h>
int f(int x) {
    int *v = malloc(sizeof(int) * 8);
    for (int i = 0; i < 8; i++) v[i] = x + i;
    int s = v[7];
    free(v);
    return s;
}
