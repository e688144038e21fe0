/*
 * NAME
 *	deliver_esmtp 3h
 * SUMMARY
 *	the upstream transport: SMTP over libesmtp, through the bridge
 * DESCRIPTION
 *	The transport (deliver.h) that sends each batch over one connection
 *	to the first of upstream.hosts that takes it (deliver_smtp.c).
 */
#ifndef DELIVER_ESMTP_DELIVER_ESMTP_H
#define DELIVER_ESMTP_DELIVER_ESMTP_H

#include "../deliver.h"

extern const struct deliver_transport deliver_esmtp;

#endif
