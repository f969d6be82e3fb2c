#include <stdio.h>
int main(void) { puts("ditrun"); return 0; }
