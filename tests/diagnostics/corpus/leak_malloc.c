// expect: native
// A copy made with malloc and never freed by anyone.
#include <stdlib.h>
#include <string.h>
int f(int x) {
    char *copy = malloc(32);
    memset(copy, 'a', 31);
    copy[31] = 0;
    return x + (int)strlen(copy);
}
