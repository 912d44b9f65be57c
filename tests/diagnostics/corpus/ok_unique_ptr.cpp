// expect: none
// Ownership by unique_ptr: freed at scope exit.
#include <memory>
int f(int x) {
    auto p = std::make_unique<int[]>(16);
    p[0] = x;
    return p[0] + 1;
}
