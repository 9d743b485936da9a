/* A hook for the Windows tests (tests/suite/windows.rs), built with x86_64-w64-mingw32-gcc; never shipped.
 *
 *   hookprobe record FILE   writes the EVENT_* variables it got and its stdin to FILE, exits 0
 *   hookprobe linger DIR    starts `hookprobe mark DIR`, then sleeps far longer than any hook timeout
 *   hookprobe mark DIR      writes DIR\started, sleeps 6 s, writes DIR\survived: a process a hook
 *                           left behind, which a timeout must kill with the hook
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

static int write_file(const char *path, const char *text)
{
    FILE *file = fopen(path, "wb");
    if (!file)
        return 1;
    fputs(text, file);
    return fclose(file) != 0;
}

static int record(const char *path)
{
    static const char *names[] = {"EVENT_HOOK", "EVENT_ID", "EVENT_TYPE", "EVENT_STATUS",
                                  "EVENT_AFFECTS_THIS_VM", "EVENT_VM_NAME"};
    FILE *file = fopen(path, "wb");
    char buffer[4096];
    size_t n;
    if (!file)
        return 1;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *value = getenv(names[i]);
        fprintf(file, "%s=%s\n", names[i], value ? value : "");
    }
    fputs("stdin=", file);
    while ((n = fread(buffer, 1, sizeof buffer, stdin)) > 0)
        fwrite(buffer, 1, n, file);
    fputs("\n", file);
    return fclose(file) != 0;
}

static int linger(const char *self, const char *dir)
{
    char command[2 * MAX_PATH + 16];
    STARTUPINFOA startup = {sizeof startup};
    PROCESS_INFORMATION process;
    /* The agent puts a hook in its Job object just after starting it: a process started in that
     * first instant would escape the job (docs/install.md). Real hooks take longer than this. */
    Sleep(500);
    snprintf(command, sizeof command, "\"%s\" mark \"%s\"", self, dir);
    if (!CreateProcessA(NULL, command, NULL, NULL, FALSE, 0, NULL, NULL, &startup, &process))
        return 2;
    CloseHandle(process.hProcess);
    CloseHandle(process.hThread);
    Sleep(600000);
    return 0;
}

static int mark(const char *dir)
{
    char path[MAX_PATH + 16];
    snprintf(path, sizeof path, "%s\\started", dir);
    if (write_file(path, "started\n"))
        return 1;
    Sleep(6000);
    snprintf(path, sizeof path, "%s\\survived", dir);
    return write_file(path, "survived\n");
}

int main(int argc, char **argv)
{
    char self[MAX_PATH];
    if (argc != 3)
        return 64;
    if (strcmp(argv[1], "record") == 0)
        return record(argv[2]);
    if (strcmp(argv[1], "mark") == 0)
        return mark(argv[2]);
    if (strcmp(argv[1], "linger") == 0 && GetModuleFileNameA(NULL, self, sizeof self))
        return linger(self, argv[2]);
    return 64;
}
