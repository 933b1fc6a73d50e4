/* build_fixture.h: hand-made runs (gen/build_fixture.c) for tests and for bootstrapping without
 * the spec loader. */
#ifndef BOOST_GEN_BUILD_FIXTURE_H
#define BOOST_GEN_BUILD_FIXTURE_H

#include "gen/model.h"

void run_tiny_cola(Run *run);                  /* the demo model, tp=2, btp */

#endif
