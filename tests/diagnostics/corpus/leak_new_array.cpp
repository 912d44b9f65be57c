// expect: native
// new[] without delete[].
int f(int x) {
    int *a = new int[16];
    a[0] = x;
    return a[0] + 2;
}
