/* Whether kernels launch with programmatic dependent launch ($GP_PDL, read
 * once): a process-wide choice, since every kernel of every stream takes it
 * and a kernel cannot know which engine launched it. */
#include "gp_device.h"

#include <pthread.h>
#include <stdio.h>

#define GP_PDL_DEFAULT 1

static pthread_once_t gp_pdl_once_ = PTHREAD_ONCE_INIT;
static int gp_pdl_on_ = 0;
static gp_status gp_pdl_st_ = GP_OK;
static char gp_pdl_err_[256];

static void read_pdl(void)
{
    long v;
    gp_pdl_st_ = gp_env_int("GP_PDL", 0, 1, GP_PDL_DEFAULT, &v);
    if (gp_pdl_st_ == GP_OK)
        gp_pdl_on_ = (int)v;
    else
        snprintf(gp_pdl_err_, sizeof gp_pdl_err_, "%s", gp_last_error());
}

gp_status gp_pdl_check(void)
{
    pthread_once(&gp_pdl_once_, read_pdl);
    if (gp_pdl_st_ != GP_OK)
        GP_FAIL(gp_pdl_st_, "%s", gp_pdl_err_);
    return GP_OK;
}

int gp_pdl_enabled(void)
{
    pthread_once(&gp_pdl_once_, read_pdl);
    return gp_pdl_on_;
}
