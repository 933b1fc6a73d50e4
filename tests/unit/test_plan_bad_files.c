/* test_plan_bad_files.c: every damaged plan in tests/plans_bad/ (NAME.txt) is refused with a
 * message that names the file and contains the text of NAME.expect. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "runtime/plan.h"

int main(void) {
    const char *dir = "tests/plans_bad";
    DIR *d = opendir(dir);
    CHECK(d != NULL, "tests/plans_bad is readable", "cannot open %s (run from the repository root)", dir);
    if (!d) TEST_EXIT();
    int cases = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 5 || strcmp(de->d_name + n - 4, ".txt")) continue;
        char path[512], expect_path[512], want[512] = "", err[1024] = "", name[600];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        snprintf(expect_path, sizeof expect_path, "%s/%.*s.expect", dir, (int)(n - 4), de->d_name);
        snprintf(name, sizeof name, "bad plan %s", de->d_name);
        FILE *f = fopen(expect_path, "r");
        if (!f || !fgets(want, sizeof want, f)) { CHECK(0, name, "%s is missing or empty", expect_path); if (f) fclose(f); continue; }
        fclose(f);
        want[strcspn(want, "\n")] = 0;
        Plan *p = plan_load(path, err, sizeof err);
        CHECK(!p && strstr(err, want) && strstr(err, path), name, "want '%s' naming %s, got %s: '%s'", want, path,
              p ? "a loaded plan" : "error", err);
        plan_free(p);
        cases++;
    }
    closedir(d);
    CHECK(cases >= 10, "tests/plans_bad holds the bad-plan cases", "only %d found", cases);
    TEST_EXIT();
}
