// expect: none
// A vector on the stack; its buffer is freed with it.
#include <vector>
int f(int x) {
    std::vector<int> v(32, x);
    return v.back() + 1;
}
