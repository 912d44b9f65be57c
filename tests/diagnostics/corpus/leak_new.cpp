// expect: native
// new without delete.
#include <vector>
int f(int x) {
    std::vector<int> *v = new std::vector<int>(8, x);
    return (*v)[0] + 1;
}
