/*
 * replay - run a fuzz harness over files, without libFuzzer: make test
 * replays the seed corpus (and every crash found, once added) with gcc.
 * usage: replay FILE|DIR...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (fp == NULL || fseek(fp, 0, SEEK_END) < 0 || (n = ftell(fp)) < 0) {
		perror(path);
		return 1;
	}
	rewind(fp);
	buf = malloc((size_t) n + 1);
	if (buf == NULL || fread(buf, 1, (size_t) n, fp) != (size_t) n) {
		perror(path);
		return 1;
	}
	fclose(fp);
	LLVMFuzzerTestOneInput(buf, (size_t) n);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int i, files = 0, bad = 0;

	for (i = 1; i < argc; i++) {
		struct stat st;
		DIR *d;
		struct dirent *e;
		char path[4096];

		if (stat(argv[i], &st) < 0) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			bad += replay_file(argv[i]);
			files++;
			continue;
		}
		if ((d = opendir(argv[i])) == NULL)
			return 1;
		while ((e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			bad += replay_file(path);
			files++;
		}
		closedir(d);
	}
	printf("%s: replayed %d inputs\n", argv[0], files);
	return bad != 0;
}
