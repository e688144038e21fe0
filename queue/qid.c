/*
 * NAME
 *	qid 3
 * SUMMARY
 *	queue ID generation
 */
#include <pthread.h>
#include <string.h>

#include "../util/clock.h"
#include "qid.h"

static const char qid_digits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUV";
static pthread_mutex_t qid_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t qid_last;
static int qid_node = -1;	/* set once at start, before any qid_next() */

/* qid_encode - 12 base-32 digits, most significant first */
void qid_encode(uint64_t v, char out[QID_LEN + 1])
{
	int i;

	for (i = QID_LEN - 1; i >= 0; i--) {
		out[i] = qid_digits[v & 31];
		v >>= 5;
	}
	out[QID_LEN] = 0;
}

/*
 * qid_valid - is s a QID as qid_encode() writes it, the only form any
 * release has issued on either backend: QID_LEN of qid_digits
 */
int qid_valid(const char *s)
{
	return s != NULL && strspn(s, qid_digits) == QID_LEN && s[QID_LEN] == 0;
}

/* qid_decode - inverse of qid_encode */
int qid_decode(const char *qid, uint64_t *v)
{
	uint64_t r = 0;
	int i;

	if (!qid_valid(qid))
		return -1;
	for (i = 0; i < QID_LEN; i++)
		r = (r << 5) | (uint64_t) (strchr(qid_digits, qid[i]) - qid_digits);
	*v = r;
	return 0;
}

/* qid_set_node - this node's number in a shared store, or -1 */
void qid_set_node(int node)
{
	pthread_mutex_lock(&qid_lock);
	qid_node = node >= 0 && node < (1 << QID_NODE_BITS) ? node : -1;
	pthread_mutex_unlock(&qid_lock);
}

/* qid_seed - never go below a QID already issued */
void qid_seed(const char *last)
{
	uint64_t v;

	if (last == NULL || qid_decode(last, &v) < 0)
		return;
	pthread_mutex_lock(&qid_lock);
	if (v > qid_last)
		qid_last = v;
	pthread_mutex_unlock(&qid_lock);
}

/* qid_next - the next QID: the clock in microseconds, strictly increasing */
void qid_next(char out[QID_LEN + 1])
{
	uint64_t now;

	now = (uint64_t) clock_us();
	pthread_mutex_lock(&qid_lock);
	if (qid_node >= 0) {		/* the node's number in the low bits, always */
		now = now << QID_NODE_BITS | (uint64_t) qid_node;
		if (now <= qid_last)
			now = ((qid_last >> QID_NODE_BITS) + 1) << QID_NODE_BITS | (uint64_t) qid_node;
	} else if (now <= qid_last) {
		now = qid_last + 1;
	}
	qid_last = now;
	pthread_mutex_unlock(&qid_lock);
	qid_encode(now, out);
}
