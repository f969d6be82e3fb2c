#include <stdio.h>
int main(void) { puts("tiny"); return 0; }
