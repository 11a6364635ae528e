// The FUSE floor: a file system that stores nothing and answers every request of the create benchmarks
// (bench/write-vs-kernel.sh, create_20k and create_2x10k) at once. Mounted with the options xfswin mounts with
// (default_permissions, one-hour attribute and entry timeouts) and served by libfuse's multithreaded loop with as
// many threads as xfswin's default, it receives the same requests for each create (GETATTR of the directory, whose
// attributes the previous create in it made stale; LOOKUP; CREATE; GETXATTR of security.capability before the
// write; WRITE; RELEASE), so its time is what the FUSE round trips alone cost on the machine: no FUSE server can
// create faster.
//
// Names: directories d<N> under the root (inode 2 + N, made by mkdir); every other name is absent until created.
// Usage: fuse-null MOUNTPOINT THREADS   (serves until unmounted)
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { FIRST_FILE_INODE = 1 << 20, DIRECTORIES = 1 << 16 };
static const double TIMEOUT = 3600;
static atomic_ulong next_file_inode = FIRST_FILE_INODE;
static atomic_bool made[DIRECTORIES];

static void fill_stat(fuse_ino_t ino, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino < FIRST_FILE_INODE) {
        st->st_mode = S_IFDIR | 0755;
        st->st_nlink = 2;
    } else {
        st->st_mode = S_IFREG | 0644;
        st->st_nlink = 1;
    }
}

static void reply_entry(fuse_req_t req, fuse_ino_t ino)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = ino;
    e.generation = 1;
    e.attr_timeout = TIMEOUT;
    e.entry_timeout = TIMEOUT;
    if (ino != 0)
        fill_stat(ino, &e.attr);
    fuse_reply_entry(req, &e);
}

// The directory number of a root entry named d<N>, or -1.
static int directory_number(fuse_ino_t parent, const char *name)
{
    if (parent != FUSE_ROOT_ID || name[0] != 'd' || name[1] == '\0')
        return -1;
    char *end;
    long n = strtol(name + 1, &end, 10);
    return *end == '\0' && n >= 0 && n < DIRECTORIES ? (int)n : -1;
}

static void on_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    int n = directory_number(parent, name);
    reply_entry(req, n >= 0 && atomic_load(&made[n]) ? (fuse_ino_t)(2 + n) : 0);
}

static void on_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    fill_stat(ino, &st);
    fuse_reply_attr(req, &st, TIMEOUT);
}

static void on_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)mode;
    int n = directory_number(parent, name);
    if (n < 0) {
        fuse_reply_err(req, EPERM);
        return;
    }
    atomic_store(&made[n], true);
    reply_entry(req, (fuse_ino_t)(2 + n));
}

static void on_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
    (void)parent; (void)name; (void)mode;
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = atomic_fetch_add(&next_file_inode, 1);
    e.generation = 1;
    e.attr_timeout = TIMEOUT;
    e.entry_timeout = TIMEOUT;
    fill_stat(e.ino, &e.attr);
    fuse_reply_create(req, &e, fi);
}

static void on_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    (void)ino; (void)name; (void)size;
    fuse_reply_err(req, ENODATA);
}

static void on_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)ino; (void)buf; (void)off; (void)fi;
    fuse_reply_write(req, size);
}

static void on_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino; (void)fi;
    fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops operations = {
    .lookup = on_lookup,
    .getattr = on_getattr,
    .mkdir = on_mkdir,
    .create = on_create,
    .getxattr = on_getxattr,
    .write = on_write,
    .release = on_release,
};

int main(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: %s MOUNTPOINT THREADS\n", argv[0]);
        return 2;
    }
    char *options[] = { argv[0], "-o", "default_permissions,fsname=fuse-null", NULL };
    struct fuse_args args = FUSE_ARGS_INIT(3, options);
    struct fuse_session *session = fuse_session_new(&args, &operations, sizeof operations, NULL);
    if (session == NULL || fuse_session_mount(session, argv[1]) != 0)
        return 1;
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, (unsigned)atoi(argv[2]));
    fuse_loop_cfg_set_idle_threads(config, (unsigned)atoi(argv[2]));
    int status = fuse_session_loop_mt(session, config);
    fuse_loop_cfg_destroy(config);
    fuse_session_unmount(session);
    fuse_session_destroy(session);
    return status == 0 ? 0 : 1;
}
