#include <stdio.h>
int main(void) { puts("ditc"); return 0; }
