// expect: native
// A helper returns a heap string; the caller drops it.
#include <stdlib.h>
#include <string.h>
static char *label(int x) {
    char *s = malloc(16);
    s[0] = (char)('a' + x % 26);
    s[1] = 0;
    return s;
}
int f(int x) {
    return x + (int)strlen(label(x));
}
