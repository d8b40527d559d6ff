// faultfs: a FUSE passthrough file system whose writes can be made to fail
// with EIO on command, for tests/faults/io_errors.sh (device mapper's
// dm-error and dm-flakey are not available in every kernel; FUSE is).
//
//   faultfs ROOT MOUNTPOINT [-f] [other FUSE options]
//
// Passes every call through to the directory ROOT. While failing (SIGUSR1
// turns it on, SIGUSR2 off) every call that would change anything -- write,
// fsync, fdatasync, create, truncate, fallocate, rename, unlink, mkdir,
// rmdir -- returns EIO and changes nothing; reads, listings and stats go on.
// A file on it can back a loop device (losetup), so that a kernel file
// system on that device sees the errors as a failing disk's.
//
// Built by tests/faults/io_errors.sh into target/faults/ (cc faultfs.c
// $(pkg-config fuse3 --cflags --libs)).
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static int root_fd = -1;
static volatile sig_atomic_t failing = 0;
static volatile long refused = 0;

static void on_usr1(int sig) { (void)sig; failing = 1; }
static void on_usr2(int sig) { (void)sig; failing = 0; }

// The path relative to ROOT ("." for the root itself).
static const char *rel(const char *path) {
    while (*path == '/') path++;
    return *path ? path : ".";
}

#define FAIL_IF_FAILING()                                                      \
    do {                                                                       \
        if (failing) {                                                         \
            __sync_fetch_and_add(&refused, 1);                                 \
            return -EIO;                                                       \
        }                                                                      \
    } while (0)

static void *ff_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    (void)conn;
    cfg->use_ino = 1;
    // No kernel caching of attributes or data: every call comes here.
    cfg->entry_timeout = 0;
    cfg->attr_timeout = 0;
    cfg->negative_timeout = 0;
    cfg->direct_io = 1;
    return NULL;
}

static int ff_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    int r = fi ? fstat(fi->fh, st) : fstatat(root_fd, rel(path), st, AT_SYMLINK_NOFOLLOW);
    return r == -1 ? -errno : 0;
}

static int ff_access(const char *path, int mask) {
    return faccessat(root_fd, rel(path), mask, 0) == -1 ? -errno : 0;
}

static int ff_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    (void)off; (void)fi; (void)flags;
    int fd = openat(root_fd, rel(path), O_RDONLY | O_DIRECTORY);
    if (fd == -1) return -errno;
    DIR *d = fdopendir(fd);
    if (!d) { int e = errno; close(fd); return -e; }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        memset(&st, 0, sizeof st);
        st.st_ino = de->d_ino;
        st.st_mode = de->d_type << 12;
        if (fill(buf, de->d_name, &st, 0, 0)) break;
    }
    closedir(d);
    return 0;
}

static int ff_mkdir(const char *path, mode_t mode) {
    FAIL_IF_FAILING();
    return mkdirat(root_fd, rel(path), mode) == -1 ? -errno : 0;
}

static int ff_unlink(const char *path) {
    FAIL_IF_FAILING();
    return unlinkat(root_fd, rel(path), 0) == -1 ? -errno : 0;
}

static int ff_rmdir(const char *path) {
    FAIL_IF_FAILING();
    return unlinkat(root_fd, rel(path), AT_REMOVEDIR) == -1 ? -errno : 0;
}

static int ff_rename(const char *from, const char *to, unsigned int flags) {
    FAIL_IF_FAILING();
    return renameat2(root_fd, rel(from), root_fd, rel(to), flags) == -1 ? -errno : 0;
}

static int ff_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
    FAIL_IF_FAILING();
    int r = fi ? fchmod(fi->fh, mode) : fchmodat(root_fd, rel(path), mode, 0);
    return r == -1 ? -errno : 0;
}

static int ff_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    FAIL_IF_FAILING();
    int r;
    if (fi) {
        r = ftruncate(fi->fh, size);
    } else {
        int fd = openat(root_fd, rel(path), O_WRONLY);
        if (fd == -1) return -errno;
        r = ftruncate(fd, size);
        if (r == -1) { int e = errno; close(fd); return -e; }
        close(fd);
    }
    return r == -1 ? -errno : 0;
}

static int ff_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi) {
    int r = fi ? futimens(fi->fh, tv) : utimensat(root_fd, rel(path), tv, AT_SYMLINK_NOFOLLOW);
    return r == -1 ? -errno : 0;
}

static int ff_open(const char *path, struct fuse_file_info *fi) {
    if ((fi->flags & (O_TRUNC | O_CREAT)) || (fi->flags & O_ACCMODE) != O_RDONLY) {
        // Opening for writing changes nothing by itself; truncation does.
        if (fi->flags & O_TRUNC) FAIL_IF_FAILING();
    }
    int fd = openat(root_fd, rel(path), fi->flags & ~O_NOFOLLOW);
    if (fd == -1) return -errno;
    fi->fh = fd;
    return 0;
}

static int ff_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
    FAIL_IF_FAILING();
    int fd = openat(root_fd, rel(path), fi->flags, mode);
    if (fd == -1) return -errno;
    fi->fh = fd;
    return 0;
}

static int ff_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path;
    ssize_t r = pread(fi->fh, buf, size, off);
    return r == -1 ? -errno : (int)r;
}

static int ff_write(const char *path, const char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi) {
    (void)path;
    FAIL_IF_FAILING();
    ssize_t r = pwrite(fi->fh, buf, size, off);
    return r == -1 ? -errno : (int)r;
}

static int ff_statfs(const char *path, struct statvfs *st) {
    (void)path;
    return fstatvfs(root_fd, st) == -1 ? -errno : 0;
}

static int ff_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    close(fi->fh);
    return 0;
}

static int ff_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path;
    FAIL_IF_FAILING();
    int r = datasync ? fdatasync(fi->fh) : fsync(fi->fh);
    return r == -1 ? -errno : 0;
}

static int ff_opendir(const char *path, struct fuse_file_info *fi) {
    int fd = openat(root_fd, rel(path), O_RDONLY | O_DIRECTORY);
    if (fd == -1) return -errno;
    fi->fh = fd;
    return 0;
}

static int ff_releasedir(const char *path, struct fuse_file_info *fi) {
    (void)path;
    close(fi->fh);
    return 0;
}

static int ff_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path; (void)datasync;
    FAIL_IF_FAILING();
    return fsync(fi->fh) == -1 ? -errno : 0;
}

static int ff_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi) {
    (void)path;
    FAIL_IF_FAILING();
    return fallocate(fi->fh, mode, off, len) == -1 ? -errno : 0;
}

static const struct fuse_operations ops = {
    .init = ff_init,
    .getattr = ff_getattr,
    .access = ff_access,
    .readdir = ff_readdir,
    .mkdir = ff_mkdir,
    .unlink = ff_unlink,
    .rmdir = ff_rmdir,
    .rename = ff_rename,
    .chmod = ff_chmod,
    .truncate = ff_truncate,
    .utimens = ff_utimens,
    .open = ff_open,
    .create = ff_create,
    .read = ff_read,
    .write = ff_write,
    .statfs = ff_statfs,
    .release = ff_release,
    .fsync = ff_fsync,
    .opendir = ff_opendir,
    .releasedir = ff_releasedir,
    .fsyncdir = ff_fsyncdir,
    .fallocate = ff_fallocate,
};

int main(int argc, char *argv[]) {
    if (argc < 3) {
        fprintf(stderr, "usage: faultfs ROOT MOUNTPOINT [-f] [FUSE options]\n");
        return 2;
    }
    root_fd = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (root_fd == -1) {
        perror(argv[1]);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_usr2;
    sigaction(SIGUSR2, &sa, NULL);
    // argv without ROOT: fuse_main sees MOUNTPOINT and its options.
    argv[1] = argv[0];
    return fuse_main(argc - 1, argv + 1, &ops, NULL);
}
