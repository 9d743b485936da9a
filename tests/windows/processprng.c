/* bcryptprimitives.dll's ProcessPrng for Wine 8 (Debian 12), which lacks it while Rust's standard
 * library imports it on Windows. Built by tests/suite/windows.rs with x86_64-w64-mingw32-gcc and placed
 * in the test's own Wine prefix only; never shipped. RtlGenRandom (advapi32's SystemFunction036)
 * gives the same cryptographically random bytes. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
