#include <cstdio>
int main() { std::puts("ridge"); return 0; }
